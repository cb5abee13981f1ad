"""The model on a live recording of three Kafka 3.9.2 brokers with isrwatch-agent (tests/agent/data/README.md: a
stalled follower, a leader paused past the lag, a kill and restart, an offline partition, a preferred election).

What the brokers really did is in the recording too (`isr_updated`, `isr_change_propagated`, and the brokers' own
`Shrinking ISR` / `ISR updated` log lines): the model must have decided exactly that, and the audit must find no
divergence but timing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Mapping
from operator import itemgetter
from pathlib import Path

import msgspec
import pytest

from isrwatch.state.config import Config
from isrwatch.state.replay import ReplayResult, replay
from tests.support.state import run_local, run_stateful

DATA = Path(__file__).parents[1] / "agent" / "data"
BROKERS = (1, 2, 3)
# The recording's brokers: replica.lag.time.max.ms 6 s; the agent profile runs on their own ticks only.
CONFIG = Config(replica_lag_time_max_ms=6000).with_profile("agent")
SHRINKING = re.compile(r"\[Partition (\S+)-(\d+) broker=(\d+)\] Shrinking ISR from ([\d,]+) to ([\d,]+)\.")
UPDATED = re.compile(r"\[Partition (\S+)-(\d+) broker=(\d+)\] ISR updated to ([\d,]+)\s+and version updated to (\d+)")


def replayed(kind: str) -> ReplayResult:
    with contextlib.ExitStack() as stack:
        files = [stack.enter_context(open(DATA / f"broker{b}.{kind}.jsonl", "rb")) for b in BROKERS]
        return replay(files, CONFIG)


@pytest.fixture(scope="module")
def coalesced() -> ReplayResult:
    return replayed("events")


def ints(text: str) -> list[int]:
    return sorted(int(x) for x in text.split(","))


def test_the_models_isr_writes_are_the_brokers(coalesced: ReplayResult) -> None:
    """Every shrink and expand the model decided is one the brokers' logs show, by broker, partition and ISR: the
    leader paused past the lag shrinking all its followers, the restart's expands, all of them, but the one write
    the audit calls timing (made while the broker's previous write was in flight: see below)."""
    model = sorted(
        (d.leader, d.topic, d.partition, tuple(d.isr_after))
        for d in coalesced.decisions
        if d.kind in ("shrink", "expand")
    )
    logged = sorted(
        (int(m[3]), m[1], int(m[2]), tuple(ints(m[4])))
        for b in BROKERS
        for m in UPDATED.finditer((DATA / f"broker{b}.kafka-log.txt").read_text())
    )
    [timing] = [d for d in coalesced.divergences if d.subject == "isr"]
    assert timing.model is not None and timing.observed is not None
    sides = {
        (timing.broker, timing.topic, timing.partition, tuple(timing.model.isr)),  # type: ignore[union-attr]
        (timing.broker, timing.topic, timing.partition, tuple(timing.observed.isr)),  # type: ignore[union-attr]
    }
    assert len(model) == len(logged) == 19
    assert set(model) ^ set(logged) <= sides
    assert [w for w in model if w not in sides] == [w for w in logged if w not in sides]
    shrinks = sorted(
        (int(m[3]), m[1], int(m[2]), tuple(ints(m[4])), tuple(ints(m[5])))
        for b in BROKERS
        for m in SHRINKING.finditer((DATA / f"broker{b}.kafka-log.txt").read_text())
    )
    assert shrinks == sorted(
        (d.leader, d.topic, d.partition, tuple(d.isr_before), tuple(d.isr_after))
        for d in coalesced.decisions
        if d.kind == "shrink"
    )


def test_the_audit_finds_only_timing(coalesced: ReplayResult) -> None:
    """One timing divergence, from the leader of orders-1 resuming after a pause: its shrink's ZooKeeper write took
    1.7 s, during which Kafka starts no expand (the model expanded replica 1 first, the broker replica 2). The batch
    that followed goes in the broker's run: the model takes the write's commit stamp from the run's report."""
    assert coalesced.summary["observed_by_type"] == {"IsrChangePropagated": 11, "IsrUpdated": 19}
    kinds = [(d.subject, str(d.kind), d.topic, d.partition, d.broker) for d in coalesced.divergences]
    assert kinds == [("isr", "timing", "orders", 1, 3)]
    in_flight = coalesced.divergences[0]
    assert in_flight.margin_ms is not None and -2000 < in_flight.margin_ms < 0
    assert in_flight.cause == "in_flight"


def test_the_models_batches_are_the_brokers(coalesced: ReplayResult) -> None:
    """Every batch, at the broker's run and with its partitions, even after the orders-1 write that committed 1.7 s
    after the model decided it; each carries the broker's stamp of its last change (when the write committed)."""
    model = {(p.broker, p.ts, tuple((tp.topic, tp.partition) for tp in p.partitions)) for p in coalesced.propagations}
    brokers = {
        (o.broker, o.ts, tuple((tp.topic, tp.partition) for tp in o.partitions))
        for o in coalesced.observed
        if type(o).__name__ == "IsrChangePropagated"
    }
    assert model == brokers and len(brokers) == 11
    commits = {o.ts for o in coalesced.observed if type(o).__name__ == "IsrUpdated"}
    assert all(p.last_change_ts in commits for p in coalesced.propagations), "each batch's last change is a commit"


def test_coalescing_changes_no_output(coalesced: ReplayResult) -> None:
    """The agent's coalesced stream and its raw stream of the same run give the same outputs (agent/README.md)."""
    raw = replayed("raw")
    assert raw.summary["events"] > coalesced.summary["events"] + 400

    def unnumbered(records: list) -> str:  # each stream numbers its own events (seq)
        return re.sub(rb',?"seq":\d+', b"", msgspec.json.encode(records)).decode()

    for name in ("decisions", "propagations", "records", "observed", "divergences"):
        assert unnumbered(getattr(raw, name)) == unnumbered(getattr(coalesced, name)), name


def test_the_stream_cut_line_by_line_finds_the_replays_divergences() -> None:
    """The audit serialises its state between micro-batches: the streaming shell with every line its own micro-batch
    judges the recording's writes and batches as the one-pass replay does, cause and margin included."""
    lines = [line for b in BROKERS for line in (DATA / f"broker{b}.events.jsonl").read_bytes().splitlines()]
    events = sorted(
        ({k: v for k, v in msgspec.json.decode(line).items() if k != "seq"} for line in lines), key=itemgetter("ts")
    )
    config = {f.name: getattr(CONFIG, f.name) for f in dataclasses.fields(CONFIG)}
    replayed, streamed = run_local(events, **config), run_stateful(events, **config)
    assert streamed.divergences == replayed.divergences
    assert [(d["kind"], d["cause"]) for d in streamed.divergences] == [("timing", "in_flight")]


def test_the_sink_keeps_no_partitions_sides_the_keys_pair_them() -> None:
    """The audit's per-partition state lives with the partition (issue 29): each state key pairs and judges its own
    partitions' ISR writes, so the sink's audit, between micro-batches, holds no write or broker write waiting for a
    partner, only the batches and the marks their verdicts look back on; and the divergences are the replay's."""
    from isrwatch.state.audit import Audit
    from isrwatch.state.replay import replay_events
    from isrwatch.streaming.sink import AUDIT_BLOB
    from isrwatch.streaming.testing import run_stateful as stateful
    from tests.support.state import lines_of, parse_all, stream_config

    lines = [line for b in BROKERS for line in (DATA / f"broker{b}.events.jsonl").read_bytes().splitlines()]
    events = sorted(
        ({k: v for k, v in msgspec.json.decode(line).items() if k != "seq"} for line in lines), key=itemgetter("ts")
    )
    config = stream_config(events, {f.name: getattr(CONFIG, f.name) for f in dataclasses.fields(CONFIG)})
    held: list[int] = []
    batches: list[int] = []

    def sink(blobs: Mapping[str, bytes]) -> None:
        audit = Audit(config, blobs.get(AUDIT_BLOB))
        held.append(sum(len(p.writes) + len(p.observed) for p in audit.partitions.values()))
        batches.append(sum(len(b.batches) + len(b.propagated) for b in audit.brokers.values()))

    streamed = stateful(lines_of(events), range(0, len(events), 40), config, buckets=4, each_sink=sink)
    assert held and not any(held)
    assert any(batches), "the sink judges the brokers' batches"
    assert streamed.divergences == replay_events(parse_all(events), config).divergences
