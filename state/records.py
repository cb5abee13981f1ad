"""Output records of SPEC §5 that are derived from state rather than emitted by a rule."""

from __future__ import annotations

from .config import Config
from .partition import INF, Partition
from .schedule import first_at_or_after


def partition_record(p: Partition, config: Config) -> dict:
    """The partition state record: §1 fields, health flags, and each follower with its shrink outlook."""
    lag = config.replica_lag_time_max_ms
    isr = p.isr
    offline = p.leader == -1
    followers = []
    for f in p.followers:
        replica = f.replica
        in_sync = replica in isr
        eligible = None
        predicted = None
        if in_sync and p.has_leader and f.leo != p.leader_leo:
            eligible = f.last_caught_up_ms + lag + 1
            at = first_at_or_after(eligible, config.schedule_origin_ms, config.expiration_interval_ms)
            predicted = None if at >= INF else at
        followers.append({
            "replica": replica, "leo": f.leo, "log_start_offset": f.log_start_offset,
            "last_caught_up_ms": f.last_caught_up_ms, "last_fetch_leader_leo": f.last_fetch_leader_leo,
            "last_fetch_ms": f.last_fetch_ms, "in_sync": in_sync,
            "lag_offsets": p.leader_leo - f.leo if f.leo >= 0 else None,
            "shrink_eligible_at_ms": eligible, "predicted_shrink_at_ms": predicted,
        })
    min_isr = config.min_isr(p.topic)
    return {
        "cluster": p.cluster, "topic": p.topic, "partition": p.partition, "leader": p.leader,
        "leader_epoch": p.leader_epoch, "controller_epoch": p.controller_epoch,
        "partition_epoch": p.partition_epoch, "replicas": list(p.replicas), "isr": list(isr), "hw": p.hw,
        "leader_leo": p.leader_leo, "leader_epoch_start_offset": p.leader_epoch_start_offset,
        "offline": offline, "under_replicated": len(isr) < len(p.replicas),
        "under_min_isr": len(isr) < min_isr, "at_min_isr": len(isr) == min_isr, "followers": followers,
    }
