"""A broker with a wrong clock on real brokers (SPEC §6, "A jump needs a witness"): the real recording of three 3.9
brokers (tests/agent/data) on a topic of the lab's monitored cluster left at `CreateTime`, each record stamped with
its sender's clock as the agent's producer stamps it, one broker's clock a year ahead or ten minutes behind, read by
`isrwatch run` from the `kafka-python:` source. The partitions that broker never leads and the other brokers' batches
come out as a replay without that broker's events, and only its events are dead letters.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from isrwatch.lab import faults
from isrwatch.lab.record import Lab
from isrwatch.state.replay import replay
from isrwatch.store import open_store
from tests.support.corroboration import AGENT, YEAR_MS, encoded, led_by, recording
from tests.support.jobs import dump, run_job
from tests.support.state import canonical


def _topic(lab: Lab) -> str:
    """One partition, so the records arrive in the order the brokers sent them; CreateTime, kept forever."""
    import uuid

    from kafka.admin import NewTopic

    name = f"skewed-{uuid.uuid4().hex[:8]}"
    settings = {"message.timestamp.type": "CreateTime", "retention.ms": "-1"}
    with faults.admin(lab.bootstrap_servers) as client:
        client.create_topics([NewTopic(name, 1, 3, topic_configs=settings)])
    return name


def _produce(bootstrap: str, topic: str, events: list[dict]) -> None:
    """Each event stamped with its own `ts`: a CreateTime record carries the sending broker's clock."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for ev in events:
        producer.send(topic, json.dumps(ev).encode(), partition=0, timestamp_ms=ev["ts"])
    producer.flush()
    producer.close()


@pytest.mark.parametrize(("skewed", "shift_ms"), [(3, YEAR_MS), (1, -600_000)])
def test_a_broker_with_a_wrong_clock_on_the_kafka_source_changes_nothing_it_does_not_lead(
    spark, tmp_path: Path, lab: Lab, skewed: int, shift_ms: int
) -> None:
    events = recording(skewed, shift_ms)
    topic = _topic(lab)
    _produce(lab.bootstrap_servers, topic, events)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    run_job(f"kafka-python:{lab.bootstrap_servers}/{topic}", url, tmp_path / "checkpoint", AGENT, max_per_batch=150)

    others = encoded([ev for ev in events if ev.get("broker") != skewed])
    theirs = led_by(skewed, events)
    with open_store(url) as store:
        as_of = store.partition_as_of()
        frontier = store.event_time().clusters["lab"]
    got = dump(url)
    # What the store must hold: each partition the skewed broker never leads as a replay without its events up to
    # the time the store says that partition is exact at, the other brokers' batches up to the cluster's frontier.
    decisions, batches = [], replay([others], AGENT, frontier - 1).propagations
    for (_, topic, partition), at in as_of.items():
        if (topic, partition) not in theirs:
            decisions += [
                d for d in replay([others], AGENT, at - 1).decisions if (d.topic, d.partition) == (topic, partition)
            ]
    mine = [d for d in got["decisions"] if (json.loads(d)["topic"], json.loads(d)["partition"]) not in theirs]
    assert len(decisions) >= 5 and mine == canonical(decisions)
    assert [p for p in got["propagations"] if json.loads(p)["broker"] != skewed] == canonical(
        [p for p in batches if p.broker != skewed]
    )
    dead = [json.loads(json.loads(d)["raw"]) for d in got["dead_letters"]]
    assert dead and all(ev["broker"] == skewed for ev in dead)
