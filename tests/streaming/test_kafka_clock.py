"""A broker's wrong clock on real Kafka (SPEC §6, clock offsets): the agent recording of three 3.9 brokers, broker 1's
clock a year ahead and broker 3's ten minutes behind (tests/state/test_clock.py), produced to a LogAppendTime topic
of the lab and read by each Kafka source. The arrival times are the records' append times, so broker 1's events are
all `ts_in_future`, and its year shows all the same."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from isrwatch.lab.record import Lab
from isrwatch.state.config import Config
from isrwatch.store import open_store
from tests.support.clock import SKEW, skewed_lines
from tests.support.jobs import run_job
from tests.support.kafka import new_topic, produce

CONFIG = Config(replica_lag_time_max_ms=6000).with_profile("agent")
# The records of one broker are appended within a few seconds of the others' (one producer, one burst).
APPEND_SPREAD_MS = 5_000


def rebased(now_ms: int) -> dict[int, list[dict]]:
    """Each broker's skewed events, all moved so that the healthy broker's last one is two seconds before `now_ms`:
    as if the brokers had just sent them."""
    events = {b: [json.loads(line) for line in skewed_lines(b)] for b in (1, 2, 3)}
    shift = now_ms - 2_000 - max(ev["ts"] for ev in events[2])
    for evs in events.values():
        for ev in evs:
            for key in [k for k in ev if k == "ts" or k.endswith("_ms")]:
                ev[key] += shift
    return events


@pytest.mark.parametrize("kind", ["kafka", "kafka-python"])
def test_a_year_ahead_and_a_ten_minutes_behind_broker_on_the_kafka_source(spark, tmp_path: Path, lab: Lab, kind: str):
    topic = new_topic(lab)  # LogAppendTime, as isrwatch's events topic is created
    events = rebased(int(time.time() * 1000))
    produce(lab.bootstrap_servers, topic, [ev for b in (1, 2, 3) for ev in events[b]])
    url = f"sqlite:///{tmp_path / 'store.db'}"
    run_job(f"{kind}:{lab.bootstrap_servers}/{topic}", url, tmp_path / "checkpoint", config=CONFIG, max_per_batch=300)
    with open_store(url) as store:
        offsets = {b["broker"]: b.get("clock_offset_ms") for b in store.brokers()}
        refused = [
            json.loads(d["raw"])["broker"]
            for d in store.dead_letters(limit=10_000).items
            if d["reason"].startswith("ts_in_future")
        ]
    # Broker 1's events were a year ahead of their arrival: every one refused, none applied; only broker 1's.
    assert refused == [1] * len(events[1])
    # Each broker's lead is its newest event against its append time: the offsets are the skews plus how far apart
    # the brokers' last events were (they stopped seconds apart), within the spread of the append times.
    newest = {b: max(ev["ts"] for ev in evs) for b, evs in events.items()}
    assert offsets[2] == 0
    for broker in (1, 3):
        offset = offsets[broker]
        assert offset is not None
        expected = newest[broker] - newest[2]
        assert abs(offset - expected) < APPEND_SPREAD_MS, (broker, offset, expected)
        assert abs(offset - SKEW[broker]) < 15_000
