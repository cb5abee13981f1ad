"""Stored records turned into the API's shapes, judged at the watermark (event time), never the wall clock."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from isrwatch.state.records import FollowerRecord, PartitionRecord, Propagation, shrink_predicted
from isrwatch.store import EventTime


def _since(now_ms: int | None, then_ms: int | None) -> int | None:
    return None if now_ms is None or then_ms is None else now_ms - then_ms


def _predicted(f: FollowerRecord, now_ms: int | None, window_ms: int | None) -> bool:
    return shrink_predicted(f.shrink_eligible_at_ms, f.last_caught_up_ms, now_ms, window_ms)


def partition_summary(record: PartitionRecord, now: EventTime, window_ms: int | None) -> dict:
    """Cruise Control's partition state shape plus the SPEC §5 health flags and the shrink outlook, judged at the
    partition's cluster's event time."""
    now_ms = now.of(record.cluster)
    members = set(record.isr)
    return {
        "cluster": record.cluster,
        "topic": record.topic,
        "partition": record.partition,
        "leader": record.leader,
        "leader_epoch": record.leader_epoch,
        "replicas": record.replicas,
        "in-sync": record.isr,
        "out-of-sync": [r for r in record.replicas if r not in members],
        "hw": record.hw,
        "leader_leo": record.leader_leo,
        "offline": record.offline,
        "under_replicated": record.under_replicated,
        "under_min_isr": record.under_min_isr,
        "at_min_isr": record.at_min_isr,
        "shrink_predicted": any(_predicted(f, now_ms, window_ms) for f in record.followers),
    }


def partition_detail(record: PartitionRecord, now: EventTime, window_ms: int | None) -> dict:
    """The full SPEC §5 record, each follower with how long ago it caught up and its shrink outlook."""
    now_ms = now.of(record.cluster)
    followers = [
        {
            **msgspec.structs.asdict(f),
            "time_since_caught_up_ms": _since(now_ms, f.last_caught_up_ms),
            "shrink_predicted": _predicted(f, now_ms, window_ms),
        }
        for f in record.followers
    ]
    return {
        **partition_summary(record, now, window_ms),
        "controller_epoch": record.controller_epoch,
        "partition_epoch": record.partition_epoch,
        "isr": record.isr,
        "leader_epoch_start_offset": record.leader_epoch_start_offset,
        "followers": followers,
        "as_of_ms": now_ms,
    }


def broker_summary(broker: Mapping[str, Any], now: EventTime) -> dict:
    now_ms = now.of(broker["cluster"])
    return {
        "cluster": broker["cluster"],
        "broker": broker["broker"],
        "partitions_led": broker["partitions_led"],
        "replicas": broker["replicas"],
        "out_of_sync_replicas": broker["out_of_sync_replicas"],
        "pending_isr_change_count": len(broker["pending"]),
        "last_isr_change_ms": broker["last_isr_change_ms"],
        "last_propagation_ms": broker["last_propagation_ms"],
        "time_since_last_propagation_ms": _since(now_ms, broker["last_propagation_ms"]),
    }


def broker_detail(
    broker: Mapping[str, Any], out_of_sync: list[dict], recent_batches: list[Propagation], now: EventTime
) -> dict:
    """A broker's replica duties, its pending ISR-change set and its recent batches."""
    now_ms = now.of(broker["cluster"])
    return {
        **broker_summary(broker, now),
        "pending_isr_changes": broker["pending"],
        "first_change_ts": broker["first_change_ts"],
        "out_of_sync_followers": [
            {**r, "time_since_caught_up_ms": _since(now_ms, r["last_caught_up_ms"])} for r in out_of_sync
        ],
        "recent_batches": recent_batches,
        "as_of_ms": now_ms,
    }
