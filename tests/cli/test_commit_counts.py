"""Shrinks and expands are counted when their ISR commits (SPEC §8): with AlterPartition a proposal the controller
refused is no shrink on /metrics; in ZooKeeper mode the leader's write is the commit. Replayed into a store, read
from a real `isrwatch serve` over HTTP."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from isrwatch.cli import main as isrwatch
from tests.support.net import serving

PARTITIONS = (0, 1)
UNTIL = 130_000


def story(alter_partition: bool) -> list[dict]:
    """Leader 1 leads orders-0 and orders-1 (replicas 1, 2, 3) and appends every 2 s; broker 3 stops fetching after
    100.2 s and is shrunk out of both at the 115 s check. With AlterPartition the controller commits orders-0's
    shrink and refuses orders-1's (FENCED_LEADER_EPOCH: it stays pending until new metadata); at 126.2 s broker 3 is
    back and orders-0's expand commits."""
    events: list[dict] = []

    def add(**fields: object) -> None:
        events.append({**fields, "seq": len(events) + 1})

    for p in PARTITIONS:
        add(
            type="leader_and_isr", ts=100_000, topic="orders", partition=p, controller_epoch=1, leader=1,
            leader_epoch=5, isr=[1, 2, 3], replicas=[1, 2, 3], partition_epoch=1, leader_leo=10, hw=10,
        )  # fmt: skip
    for ts in range(100_200, UNTIL, 2000):
        leo = ts // 100
        for p in PARTITIONS:
            add(type="append", ts=ts, topic="orders", partition=p, leader_leo=leo)
            for replica in (2, 3) if ts < 101_000 or ts > 125_000 else (2,):
                add(type="fetch", ts=ts, topic="orders", partition=p, replica=replica, fetch_offset=leo, leader_leo=leo)
        if alter_partition and ts == 114_200:  # the answers to the 115 s check's two requests
            add(
                type="alter_partition_response", ts=115_100, topic="orders", partition=0, broker=1, error=None,
                isr=[1, 2], leader_epoch=5, partition_epoch=2,
            )  # fmt: skip
            add(
                type="alter_partition_response", ts=115_150, topic="orders", partition=1, broker=1,
                error="FENCED_LEADER_EPOCH",
            )  # fmt: skip
    if alter_partition:
        add(
            type="alter_partition_response", ts=126_300, topic="orders", partition=0, broker=1, error=None,
            isr=[1, 2, 3], leader_epoch=5, partition_epoch=3,
        )  # fmt: skip
    return sorted(events, key=lambda e: (e["ts"], e["seq"]))


def counters(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.endswith("_total")
    }


@pytest.mark.parametrize(
    ("protocol", "shrinks", "expands", "proposed"),
    [("alter_partition", 1, 1, {"shrink": 2, "expand": 1}), ("zookeeper", 2, 2, {"shrink": 2, "expand": 2})],
)
def test_shrinks_count_when_their_isr_commits(
    tmp_path: Path, protocol: str, shrinks: int, expands: int, proposed: dict[str, int]
) -> None:
    events = tmp_path / "events.jsonl"
    events.write_text("".join(json.dumps(e) + "\n" for e in story(protocol == "alter_partition")))
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "replica_lag_time_max_ms": 10_000,
                "schedule_origin_ms": 100_000,
                "kafka_version": "3.9.2",
                "isr_protocol": protocol,
            }
        )
    )
    store = f"sqlite:///{tmp_path / 'isrwatch.db'}"
    args = ["replay", str(events), "--config", str(config), "--until", str(UNTIL), "--store", store]
    assert isrwatch([*args, "--out", str(tmp_path / "out")]) == 0
    with serving(store, env={**os.environ, "ISRWATCH_API_TOKEN": ""}) as base:
        text = httpx.get(f"{base}/metrics", timeout=10).text
        decisions = httpx.get(f"{base}/v1/decisions", params={"kind": "shrink"}, timeout=10).json()["decisions"]
    got = counters(text)
    cluster = ("cluster", "default")
    for kind, n in proposed.items():  # every decision: with AlterPartition, the leader's proposals
        assert got[("isrwatch_decisions_total", (cluster, ("kind", kind)))] == n
    assert got[("isrwatch_isr_shrinks_total", (("broker", "1"), cluster, ("reason", "stuck")))] == shrinks
    assert got[("isrwatch_follower_shrinks_total", (("broker", "3"), cluster, ("reason", "stuck")))] == shrinks
    assert got[("isrwatch_isr_expands_total", (("broker", "1"), cluster))] == expands
    assert {k for k in got if k[0] in ("isrwatch_isr_shrinks_total", "isrwatch_follower_shrinks_total")} == {
        ("isrwatch_isr_shrinks_total", (("broker", "1"), cluster, ("reason", "stuck"))),
        ("isrwatch_follower_shrinks_total", (("broker", "3"), cluster, ("reason", "stuck"))),
    }
    outcomes = sorted((d["partition"], *((d["proposal"] or {}).get(k) for k in ("state", "error"))) for d in decisions)
    if protocol == "alter_partition":
        assert outcomes == [(0, "committed", None), (1, "refused", "FENCED_LEADER_EPOCH")]
    else:
        assert outcomes == [(0, None, None), (1, None, None)]
