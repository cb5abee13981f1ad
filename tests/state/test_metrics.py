"""The metric catalogue is the one list of what /metrics exports: docs/CONTRACTS.md names exactly it."""

from __future__ import annotations

import re
from pathlib import Path

from isrwatch.state import metrics
from isrwatch.state.config import Config
from isrwatch.state.metrics import CATALOGUE, PARTITIONS_BY_FLAG, TALLIED, Kind, Metric
from isrwatch.state.replay import replay
from isrwatch.streaming.testing import run_stateful
from tests.support.state import append, fetch, lai, lines_of, tick

CONTRACTS = Path(__file__).parents[2] / "docs" / "CONTRACTS.md"


def _documented() -> dict[str, str]:
    """Metric name -> its label list as written in the Metrics section of CONTRACTS.md."""
    section = CONTRACTS.read_text().split("## Metrics", 1)[1]
    return {m.group(1): m.group(2) or "" for m in re.finditer(r"`(isrwatch_[a-z_]+)(?:\{([a-z_,]+)\})?`", section)}


def test_contracts_md_names_every_exported_metric_and_no_other() -> None:
    assert set(_documented()) == {m.exposed for m in CATALOGUE}


def test_contracts_md_gives_each_metric_its_labels() -> None:
    documented = _documented()
    for m in CATALOGUE:
        labels = set(filter(None, documented[m.exposed].split(",")))
        assert labels == set(m.labels) - {"le"}, m.exposed


def test_every_counter_and_histogram_reads_a_tally_and_gauges_none() -> None:
    for m in CATALOGUE:
        assert bool(m.tally) == (m.kind is not Kind.GAUGE), m.name
        assert bool(m.buckets) == (m.kind is Kind.HISTOGRAM), m.name
    assert len(TALLIED) == sum(m.kind is not Kind.GAUGE for m in CATALOGUE)
    assert len({m.name for m in CATALOGUE}) == len(CATALOGUE)


def test_every_metric_is_declared_once_in_the_catalogue() -> None:
    """Burrow-style: a metric defined in `state.metrics` but left out of the catalogue would never be exported."""
    declared = [v for v in vars(metrics).values() if isinstance(v, Metric)] + list(PARTITIONS_BY_FLAG.values())
    assert sorted(m.name for m in declared) == sorted(m.name for m in CATALOGUE)


def ap_response(ts: int, topic: str) -> dict:
    """Leader 5's AlterPartition response for `topic`-0: committed [5, 6] at partition epoch 1."""
    return {"type": "alter_partition_response", "ts": ts, "broker": 5, "topic": topic, "partition": 0, "error": None,
            "isr": [5, 6], "leader_epoch": 0, "partition_epoch": 1}  # fmt: skip


def test_every_counter_the_core_emits_has_a_catalogue_entry() -> None:
    """Inputs that make every kind of counter (each ignored kind, a dead letter, a late event), through the one-pass
    replay and the streaming shell: each counter is a catalogue counter, with a `reason` label when it has one."""
    leader = lai(1000, 1, [1, 2, 3], [1, 2, 3], 0, leader_leo=100, hw=100)
    events = [
        fetch(500, 2, 0, 0),  # before any LeaderAndIsr
        append(600, 10),
        {**leader, "broker": 2},  # a follower's copy
        {**leader, "broker": 1},
        {**leader, "broker": 1, "ts": 1001},  # the same state again
        fetch(2000, 9, 100, 100, broker=1),  # not a follower
        tick(3000, "isr-expiration", broker=1, kafka_version="5.0.0"),
        fetch(20_000, 2, 100, 100, broker=1),
        # AlterPartition (SPEC §4.9): leader 5 proposes to add 6; the controller fails it once (a retried error),
        # and answers a partition nobody proposed for (no LeaderAndIsr, no request awaiting it).
        tick(1100, broker=5, kafka_version="3.9.2", isr_protocol="alter_partition"),
        lai(1200, 5, [5], [5, 6], 0, topic="ap", leader_leo=100, hw=100, broker=5),
        fetch(1300, 6, 100, 100, topic="ap", broker=5),
        {**ap_response(1400, "ap"), "error": "NOT_CONTROLLER"},
        ap_response(1500, "nobody"),
    ]
    lines = [*lines_of(events), b"not json", lines_of([fetch(1500, 3, 100, 100, broker=1)])[0]]
    config = Config(replica_lag_time_max_ms=10_000, allowed_lateness_ms=0)
    local = replay([lines], config)
    streamed = run_stateful(lines, [len(lines) - 1], config, buckets=2)
    emitted = set(local.counters) | set(streamed.counters)
    kinds = set()
    for name in emitted:
        tally, _, reason = name.partition(".")
        metric = TALLIED[tally]
        assert metric.kind is Kind.COUNTER, name
        assert ("reason" in metric.labels) == bool(reason), name
        kinds.add(tally)
    reason_counters = {m.tally for m in CATALOGUE if m.kind is Kind.COUNTER and m.labels == ("reason",)}
    assert kinds == reason_counters | {metrics.LATE_EVENTS.tally}  # the inputs made every kind
