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


def _isr_change(record: PartitionRecord, now_ms: int | None) -> dict:
    """The ISR-change state (SPEC §4.9) and ELR, only where the record has them: ZooKeeper-mode answers keep their
    keys."""
    shown: dict[str, Any] = {}
    if record.isr_state is not None:
        shown.update(
            isr_state=record.isr_state,
            maximal_isr=record.maximal_isr,
            pending_since_ms=record.pending_since_ms,
            time_pending_ms=_since(now_ms, record.pending_since_ms),
        )
    if record.elr is not None:
        shown["elr"] = record.elr
    if record.last_known_elr is not None:
        shown["last_known_elr"] = record.last_known_elr
    return shown


def partition_summary(record: PartitionRecord, now: EventTime, window_ms: int | None) -> dict:
    """Cruise Control's partition state shape plus the SPEC §5 health flags and the shrink outlook, judged at the
    partition's cluster's event time; with AlterPartition also the ISR-change state."""
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
        **_isr_change(record, now_ms),
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


def _alter_partition(broker: Mapping[str, Any], now_ms: int | None) -> dict:
    """A broker's AlterPartition manager in short (SPEC §4.9), only for a broker that proposes with it."""
    if broker.get("queue") is None:
        return {}
    in_flight = broker["in_flight"]
    return {
        "queue_size": len(broker["queue"]),
        "in_flight_partitions": None if in_flight is None else len(in_flight["partitions"]),
        "in_flight_age_ms": None if in_flight is None else _since(now_ms, in_flight["sent_ms"]),
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
        "clock_offset_ms": broker.get("clock_offset_ms"),
        **_alter_partition(broker, now_ms),
    }


def broker_detail(
    broker: Mapping[str, Any], out_of_sync: list[dict], recent_batches: list[Propagation], now: EventTime
) -> dict:
    """A broker's replica duties, its pending ISR-change set and its recent batches; with AlterPartition its queue and
    the request in flight."""
    now_ms = now.of(broker["cluster"])
    manager = {} if broker.get("queue") is None else {"queue": broker["queue"], "in_flight": broker["in_flight"]}
    return {
        **broker_summary(broker, now),
        **manager,
        "pending_isr_changes": broker["pending"],
        "first_change_ts": broker["first_change_ts"],
        "out_of_sync_followers": [
            {**r, "time_since_caught_up_ms": _since(now_ms, r["last_caught_up_ms"])} for r in out_of_sync
        ],
        "recent_batches": recent_batches,
        "as_of_ms": now_ms,
    }
