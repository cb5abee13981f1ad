"""The model on a live recording of three Kafka 4.4.0 KRaft nodes with isrwatch-agent (tests/agent/data-kraft/
README.md: a stalled follower, a broker fenced by the controller, a preferred election).

The brokers' AlterPartition requests, their commits on both paths (the AlterPartition response, the KRaft metadata)
and their `Shrinking ISR` log lines are in the recording: the model must have proposed, requested and committed
exactly that, and the audit must find no divergence but timing, each with its cause.
"""

from __future__ import annotations

import contextlib
import re
from collections import Counter
from pathlib import Path

import msgspec
import pytest

from isrwatch.state.config import Config
from isrwatch.state.replay import ReplayResult, replay
from tests.support.alter_partition import (
    brokers_commits,
    brokers_requests,
    deposed_requests,
    latency_ms,
    models_commits,
    models_requests,
)
from tests.support.state import run_local, run_stateful

DATA = Path(__file__).parents[1] / "agent" / "data-kraft"
BROKERS = (1, 2, 3)
CONFIG = Config(replica_lag_time_max_ms=5000).with_profile("agent")  # the lab's lag; the brokers' own ticks only
SHRINKING = re.compile(r"\[Partition (\S+)-(\d+) broker=(\d+)\] Shrinking ISR from ([\d,]+) to ([\d,]+)\.")


@pytest.fixture(scope="module")
def result() -> ReplayResult:
    with contextlib.ExitStack() as stack:
        files = [stack.enter_context(open(DATA / f"broker{b}.events.jsonl", "rb")) for b in BROKERS]
        return replay(files, CONFIG)


@pytest.fixture(scope="module")
def events() -> list[dict]:
    return [
        msgspec.json.decode(line)
        for b in BROKERS
        for line in (DATA / f"broker{b}.events.jsonl").read_bytes().splitlines()
    ]


def builtins(records: list) -> list[dict]:
    return msgspec.to_builtins(records)


def test_every_line_the_agent_sent_from_kraft_brokers_is_taken(result: ReplayResult) -> None:
    """leader_and_isr with controller_epoch -1 and no controller_id, alter_partition_sent with topic_id and
    isr_broker_epochs, broker_registration, alter_partition_response: no dead letter."""
    assert result.summary["dead_letters"] == 0, result.dead_letters[:3]
    assert Counter(type(o).__name__ for o in result.observed) == {"AlterPartitionSent": 16, "IsrUpdated": 9}


def test_the_only_divergence_is_the_fenced_leaders_proposal_on_resuming(result: ReplayResult) -> None:
    """Broker 2, paused past its session and fenced, resumed as the leader of orders-1 it had been and proposed to
    shrink it to itself before it applied the metadata that gave orders-1 to broker 3 (the controller answered
    FENCED_LEADER_EPOCH): the audit's `deposed` rule (SPEC §7) calls it timing. Nothing else diverges."""
    found = [(d.kind, d.cause, d.broker, d.topic, d.partition) for d in result.divergences]
    assert found == [("timing", "deposed", 2, "orders", 1)]


def test_the_models_requests_are_the_brokers_one_to_one(result: ReplayResult, events: list[dict]) -> None:
    """Each AlterPartition request the brokers sent (broker, partitions, proposed ISRs, base partition epochs) is one
    the model sent, and no other: the deposed leader's aside."""
    deposed = deposed_requests(builtins(result.divergences))
    theirs = brokers_requests(events, deposed)
    assert len(deposed) == 1 and sum(theirs.values()) >= 12
    assert theirs == models_requests(builtins(result.alter_partitions))


def test_every_commit_the_model_took_is_one_the_brokers_applied(result: ReplayResult, events: list[dict]) -> None:
    """The model's committed proposals (ISR, partition epoch) are states the brokers committed, by the response path
    (`isr_updated`) or, for about half of them, first by the metadata path (`leader_and_isr`, no `isr_updated`)."""
    ours = models_commits(builtins(result.alter_partitions))
    assert ours and ours <= brokers_commits(events)
    responded = {(e["topic"], e["partition"], e["partition_epoch"]) for e in events if e["type"] == "isr_updated"}
    assert {c[:3] for c in ours} - responded, "no commit came by the metadata path first"


def test_the_brokers_shrink_lines_match_the_models_shrinks_one_to_one(result: ReplayResult) -> None:
    logged = Counter(
        (int(m[3]), m[1], int(m[2]), tuple(sorted(map(int, m[5].split(",")))))
        for b in BROKERS
        for m in SHRINKING.finditer((DATA / f"broker{b}.kafka-log.txt").read_text())
    )
    ours = Counter((d.leader, d.topic, d.partition, tuple(d.isr_after)) for d in result.decisions if d.kind == "shrink")
    deposed = Counter((d.broker, d.topic, d.partition, tuple(d.observed.isr)) for d in result.divergences)
    assert logged == ours + deposed and sum(ours.values()) == 7


def test_the_brokers_alter_partition_latency(events: list[dict]) -> None:
    p50, p99, answered = latency_ms(events)
    print(
        f"\n  AlterPartition latency (KRaft 4.4.0 recording): p50 {p50:.0f} ms, p99 {p99:.0f} ms, {answered} requests"
    )
    assert answered >= 12 and 0 < p50 <= p99


def test_the_stream_in_four_keys_finds_the_replays_proposals_and_divergences(events: list[dict]) -> None:
    """Every state key gets each request (its partitions' proposals for the audit) and one records it: the streaming
    shell with every line its own micro-batch over four keys observes and judges as the one-pass replay does."""
    import dataclasses

    config = {f.name: getattr(CONFIG, f.name) for f in dataclasses.fields(CONFIG)}
    lines = sorted(events, key=lambda e: (e["ts"], e["broker"], e["seq"]))
    replayed, streamed = run_local(lines, **config), run_stateful(lines, **config)
    assert [(d["kind"], d["cause"]) for d in streamed.divergences] == [("timing", "deposed")]
    assert streamed.divergences == replayed.divergences
    assert sorted(map(str, streamed.observed)) == sorted(map(str, replayed.observed))
