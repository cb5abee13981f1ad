"""The output records of SPEC §5 as typed structs, and the names they carry.

Every room shares these: the rules emit `Decision`s, the propagation book `Propagation`s and
`BrokerRecord`s, `partition.partition_record` derives a `PartitionRecord` from state; the store, the
Kafka output and the replay files encode them to the same JSON (field order is the JSON's order).
"""

from __future__ import annotations

from enum import StrEnum

from msgspec import Struct


class DecisionKind(StrEnum):
    """What a decision records: a leader's ISR write (shrink, expand) or a LeaderAndIsr outcome."""

    SHRINK = "shrink"
    EXPAND = "expand"
    LEADER_AND_ISR = "leader_and_isr"
    REJECTED = "rejected"


class ShrinkReason(StrEnum):
    """The two out-of-sync cases Kafka's `Partition.getOutOfSyncReplicas` comment names."""

    STUCK = "stuck"  # no fetch for more than the lag
    SLOW = "slow"  # fetching, but not caught up within the lag


class Trigger(StrEnum):
    """Which condition of `maybePropagateIsrChanges` sent a batch."""

    LINGER = "linger"  # no change for more than isr_change_linger_ms
    MAX_DELAY = "max_delay"  # more than isr_change_max_delay_ms since the previous batch


class PartitionState(StrEnum):
    """The partition filters operators ask for (the API's `state` and the store's indexed flags)."""

    UNDER_REPLICATED = "under_replicated"
    UNDER_MIN_ISR = "under_min_isr"
    AT_MIN_ISR = "at_min_isr"
    OFFLINE = "offline"
    SHRINK_PREDICTED = "shrink_predicted"


class TopicPartition(Struct, frozen=True, order=True):
    topic: str
    partition: int


class Decision(Struct, kw_only=True):
    """A leader's ISR decision or the outcome of a LeaderAndIsr partition state, as of `ts`."""

    ts: int
    cluster: str
    topic: str
    partition: int
    kind: DecisionKind
    leader: int | None
    leader_epoch: int
    isr_before: list[int]
    isr_after: list[int]
    replicas_changed: list[int]
    reasons: dict[str, ShrinkReason]
    error: str | None
    hw: int
    leader_leo: int


class Propagation(Struct, kw_only=True):
    """One ISR-change batch a leader broker sent (one `/isr_change_notification` znode)."""

    ts: int
    cluster: str
    broker: int
    partitions: list[TopicPartition]
    trigger: Trigger
    first_change_ts: int | None
    last_change_ts: int


class BrokerRecord(Struct, kw_only=True):
    """A leader broker's propagation throttle: its pending ISR-change set and last batch."""

    cluster: str
    broker: int
    pending: list[TopicPartition]
    first_change_ts: int | None
    last_isr_change_ms: int
    last_propagation_ms: int


class FollowerRecord(Struct, kw_only=True):
    """The leader's record of one follower, with its lag and shrink outlook."""

    replica: int
    leo: int
    log_start_offset: int
    last_caught_up_ms: int
    last_fetch_leader_leo: int
    last_fetch_ms: int
    in_sync: bool
    lag_offsets: int | None
    shrink_eligible_at_ms: int | None
    predicted_shrink_at_ms: int | None


class PartitionRecord(Struct, kw_only=True):
    """A partition's state as its leader sees it, with the health flags operators filter on."""

    cluster: str
    topic: str
    partition: int
    leader: int | None
    leader_epoch: int
    controller_epoch: int
    partition_epoch: int
    replicas: list[int]
    isr: list[int]
    hw: int
    leader_leo: int
    leader_epoch_start_offset: int | None
    offline: bool
    under_replicated: bool
    under_min_isr: bool
    at_min_isr: bool
    followers: list[FollowerRecord]


def shrink_warning_at(eligible_ms: int, last_caught_up_ms: int, window_ms: int | None = None) -> int:
    """When an ISR follower starts counting as near its lag limit: `window_ms` before it becomes eligible.

    The default window is half the lag, which a follower record carries implicitly (eligible =
    last caught-up + lag + 1, see `shrink_eligible_at`), so readers need no copy of the job's configuration.
    """
    if window_ms is None:
        window_ms = (eligible_ms - last_caught_up_ms - 1) // 2
    return eligible_ms - window_ms


def shrink_predicted(
    eligible_ms: int | None, last_caught_up_ms: int, now_ms: int | None, window_ms: int | None
) -> bool:
    """An ISR follower past its lag limit, or within `window_ms` of it, as of event time `now_ms`."""
    if eligible_ms is None or now_ms is None:
        return False
    return shrink_warning_at(eligible_ms, last_caught_up_ms, window_ms) <= now_ms
