"""The output records of SPEC §5 as typed structs, and the names they carry.

Every room shares these: the rules emit `Decision`s, the propagation book `Propagation`s and
`BrokerRecord`s, `partition.partition_record` derives a `PartitionRecord` from state; the store, the
Kafka output and the replay files encode them to the same JSON (field order is the JSON's order).
"""

from __future__ import annotations

from enum import StrEnum
from hashlib import blake2b
from typing import Literal

import msgspec
from msgspec import Struct
from msgspec.structs import replace

from .events import IsrChangePropagated, IsrUpdated
from .order import Order
from .schedule import INF


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


class IsrState(StrEnum):
    """Where a leader's ISR change stands (Partition.scala's PartitionState: Committed, PendingExpandIsr,
    PendingShrinkIsr; Partition@3.9.0-rc3 L182-272)."""

    COMMITTED = "committed"
    PENDING_EXPAND = "pending_expand"  # the maximal ISR is the committed ISR plus the replica proposed
    PENDING_SHRINK = "pending_shrink"  # the maximal ISR is the committed ISR


class PartitionState(StrEnum):
    """The partition filters operators ask for (the API's `state` and the store's indexed flags)."""

    UNDER_REPLICATED = "under_replicated"
    UNDER_MIN_ISR = "under_min_isr"
    AT_MIN_ISR = "at_min_isr"
    OFFLINE = "offline"
    ISR_PENDING = "isr_pending"  # an ISR change proposed or written and not yet committed (`isr_state` pending)
    SHRINK_PREDICTED = "shrink_predicted"


class Health(StrEnum):
    """A partition's health as an incident reads it, worst last (`HEALTH_RANK`): Kafka's UnderReplicatedPartitions
    (ISR smaller than the replicas), UnderMinIsrPartitionCount (producers with acks=all get NOT_ENOUGH_REPLICAS) and
    OfflinePartitionsCount (no leader)."""

    OK = "ok"
    UNDER_REPLICATED = "under_replicated"
    UNDER_MIN_ISR = "under_min_isr"
    OFFLINE = "offline"


HEALTH_RANK = {h: i for i, h in enumerate(Health)}


class PartitionHealth(Struct, array_like=True, frozen=True):
    """A partition's committed state where it may have changed (a decision, a commit): what the incident book takes
    instead of every partition record (`isrwatch.state.incidents`). `leader_before`: its leader before a LeaderAndIsr
    (None: not one)."""

    ts: int
    cluster: str
    topic: str
    partition: int
    health: Health
    leader: int | None
    leader_before: int | None
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    controller_epoch: int


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


class IsrCommitted(Struct, frozen=True):
    """One replica a leader's shrink removed from, or its expand added to, a committed ISR: counted when the ISR
    commits, never at the proposal (the incident book tells, `IncidentBook.commits`)."""

    cluster: str
    kind: DecisionKind  # shrink or expand
    leader: int | None  # the leader that decided it
    replica: int
    reason: ShrinkReason | None  # a shrink's: why the replica was out of sync


class Propagation(Struct, kw_only=True):
    """One ISR-change batch a leader broker sent (one `/isr_change_notification` znode)."""

    ts: int
    cluster: str
    broker: int
    partitions: list[TopicPartition]
    trigger: Trigger
    first_change_ts: int | None
    last_change_ts: int


class AlterPartitionItem(Struct, kw_only=True):
    """One partition of an AlterPartition request: the leader's proposal and, once answered, its outcome (the
    committed ISR and partition epoch, or Kafka's error name)."""

    topic: str
    partition: int
    kind: DecisionKind  # expand or shrink
    proposed_isr: list[int]
    leader_epoch: int
    partition_epoch: int  # the partition epoch the proposal is based on (Kafka sends its current one)
    submitted_ms: int  # when the leader decided and queued it
    answered_ms: int | None = None
    error: str | None = None
    committed_isr: list[int] | None = None
    committed_partition_epoch: int | None = None


class AlterPartitionRequest(Struct, kw_only=True):
    """One AlterPartition request a leader broker sent (DefaultAlterPartitionManager.sendRequest): its partitions,
    when the model has it sent, and when its last partition's answer came (None: in flight)."""

    cluster: str
    broker: int
    sent_ms: int
    response_ms: int | None
    partitions: list[AlterPartitionItem]


class BrokerRecord(Struct, kw_only=True, omit_defaults=True):
    """A broker's propagation throttle (its pending ISR-change set and last batch), with AlterPartition its manager:
    the queue of proposals not yet sent, the request in flight and how long it has been; and, for a broker that
    reports its own events (the agent), its clock's offset from its cluster (`isrwatch.state.clock`)."""

    cluster: str
    broker: int
    pending: list[TopicPartition]
    first_change_ts: int | None
    last_isr_change_ms: int
    last_propagation_ms: int
    queue: list[AlterPartitionItem] | None = None  # None: a broker without AlterPartition
    in_flight: AlterPartitionRequest | None = None
    in_flight_age_ms: int | None = None  # its cluster's time minus the request's send time
    clock_offset_ms: int | None = None  # its clock minus its cluster's median clock (None: it reports no events)


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


class PartitionRecord(Struct, kw_only=True, omit_defaults=True):
    """A partition's state as its leader sees it, with the health flags operators filter on. The ISR-change state
    (`isr_state` ..) is shown for a leader that proposes with AlterPartition, or whose write is in flight; the ELR
    when the leader's metadata carries it; a ZooKeeper-mode record without either has none of these keys."""

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
    isr_state: IsrState | None = None
    maximal_isr: list[int] | None = None  # the ISR the HW advances over: + the replica a pending expand adds
    pending_since_ms: int | None = None  # when the pending change was decided
    elr: list[int] | None = None
    last_known_elr: list[int] | None = None


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


class Shown(Struct, array_like=True, frozen=True, gc=False):
    """What a partition's stored row shows (SPEC §5, "Stored rows"), kept beside the partition by its state key."""

    digest: int  # of its exact fields (`shown`)
    at: int  # the event time it is exact at (its `as_of_ms`)
    # The first shrink time of an ISR follower after `at` (its warning, eligible or predicted time, or the warning it
    # would have from its last caught-up time were it behind): from then on the row's refreshed last caught-up time,
    # older than the follower's own, may show a warning the follower has fetched its way out of.
    until: int


_view = msgspec.msgpack.Encoder()


def shown(record: PartitionRecord, as_of: int, lag_ms: int) -> Shown:
    """What `record`'s row shows as of `as_of`: exact, everything but the offsets and times that move with each fetch
    and append (the HW, LEOs, lags, fetch and caught-up times and the shrink times they give), of which a follower
    shows only whether it is in sync. `lag_ms`: replica_lag_time_max_ms, for a follower at the leader's LEO."""
    followers = [(f.replica, f.in_sync) for f in record.followers]
    exact = replace(record, hw=0, leader_leo=0, followers=[])
    digest = int.from_bytes(blake2b(_view.encode((exact, followers)), digest_size=8).digest())
    times = []
    for f in record.followers:
        if f.in_sync:
            eligible = f.last_caught_up_ms + lag_ms + 1 if f.shrink_eligible_at_ms is None else f.shrink_eligible_at_ms
            times += [shrink_warning_at(eligible, f.last_caught_up_ms), eligible]
            if f.predicted_shrink_at_ms is not None:
                times.append(f.predicted_shrink_at_ms)
    return Shown(digest, as_of, min((t for t in times if t > as_of), default=INF))


def row_due(stored: Shown | None, now: Shown, refresh_ms: int) -> bool:
    """Whether a touched partition's row is written again (SPEC §5, "Stored rows"): never written, an exact field
    changed, a shrink time of the stored row came (`Shown.until`), or the row is `partition_refresh_ms` old. A LEO or
    HW move alone waits: writing every partition on every fetch was most of the job's cost."""
    return stored is None or now.digest != stored.digest or now.at >= stored.until or now.at >= stored.at + refresh_ms


# What the rules hand the audit and the propagation book, and what the audit finds.


class DivergenceKind(StrEnum):
    """How the model and a broker disagreed."""

    MISSED_BY_MODEL = "missed_by_model"  # the broker wrote an ISR or sent a batch the model did not decide
    UNEXPLAINED_BY_MODEL = "unexplained_by_model"  # the model decided a write or batch no broker act explains
    DIFFERENT_ISR = "different_isr"  # both wrote the same partition epoch, with different ISRs (or kinds)
    DIFFERENT_BATCH = "different_batch"  # both sent a batch in the same run, with different partitions
    TIMING = "timing"  # it hinges on the broker's clock reads or its ZooKeeper write's latency (`margin_ms`)


class Cause(StrEnum):
    """Which timing rule called a divergence `timing`: the rules of `isrwatch.state.audit.RULES`, by their names and in
    their order (SPEC §7)."""

    IN_FLIGHT = "in_flight"  # the model decided before the broker's previous ZooKeeper write committed
    BOTH_EXPAND = "both_expand"  # two expands right after a commit: Kafka ran the HW rule at the commit
    MARGIN = "margin"  # a shrink within audit_timing_ms of the lag limit: the broker's clock read decided it
    SHIFTED = "shifted"  # a batch between one side's time of a change and the other's linger deadline of it
    DISPLACED = "displaced"  # the same change in another batch of the other side, within the max delay
    DEPOSED = "deposed"  # a leader proposed from metadata older than the model's: its leadership had moved on
    APPLYING = "applying"  # an expand by a fetch just before the leader reported applying its previous commit
    FETCH_ORDER = "fetch_order"  # two expands adding followers whose fetches came within ms: applied in either order
    REPROPOSED = "reproposed"  # a leader proposed again what it had proposed: its first answer was not applied
    SPLIT = "split"  # the sides' views of the ISR were split by an earlier timing divergence


class ReplicaView(Struct, kw_only=True):
    """A follower as the model knew it: the evidence a shrink or expand is judged on."""

    replica: int
    leo: int
    last_caught_up_ms: int
    last_fetch_ms: int


# The fields an ISR write takes from the decision that makes it, as they are.
_SHARED_WITH_DECISION = ("ts", "cluster", "topic", "partition", "kind", "isr_before", "reasons")


class IsrWrite(Struct, kw_only=True):
    """One ISR write of the model (a shrink or expand), with the followers it concerned as they were."""

    ts: int
    cluster: str
    broker: int  # the leader that writes it
    topic: str
    partition: int
    partition_epoch: int  # the zkVersion the write creates
    kind: DecisionKind
    isr_before: list[int]
    isr: list[int]
    reasons: dict[str, ShrinkReason] = {}
    evidence: list[ReplicaView] = []
    # A shrink of the broker's own isr-expiration run: when that run ended (the agent's `end_ms`). Kafka checked the
    # partition at some clock in [ts, run_end_ms] (SPEC §4.7), so a broker check in it is the same run's.
    run_end_ms: int | None = None

    @classmethod
    def of(
        cls, d: Decision, partition_epoch: int, evidence: list[ReplicaView], run_end_ms: int | None = None
    ) -> IsrWrite:
        """The write a shrink or expand decides: its leader writes the decision's ISR as `partition_epoch`."""
        assert d.leader is not None, "only a partition with a leader writes its ISR"
        shared = {name: getattr(d, name) for name in _SHARED_WITH_DECISION}
        return cls(
            broker=d.leader,
            partition_epoch=partition_epoch,
            isr=d.isr_after,
            evidence=evidence,
            run_end_ms=run_end_ms,
            **shared,
        )


class ProposedIsr(Struct, tag_field="type", tag="alter_partition_proposal"):
    """One partition of a leader's AlterPartition request (`alter_partition_sent`): the broker's side of an ISR change
    in AlterPartition mode, which the audit pairs with the model's proposal (SPEC §7). Built by the core from the
    request and the model's committed state of the partition; not an input event."""

    ts: int  # when the request left the broker
    cluster: str
    topic: str
    partition: int
    leader: int  # the leader that sent it
    leader_epoch: int
    partition_epoch: int  # the epoch its commit creates: the one it is based on, plus one
    kind: Literal["shrink", "expand"]
    isr: list[int]  # the proposed ISR, sorted
    isr_before: list[int] | None = None  # the committed ISR it is based on, where the model has that epoch


class Observation(Struct, kw_only=True, tag_field="type", tag="observation"):
    """A broker's ISR write or proposal, with the model's view of the partition when it happened (tagged, to travel in
    one list with `IsrChangePropagated`). `audited` False: recorded only (an AlterPartition leader's `isr_updated` is
    a commit, not its decision: the audit pairs the model's proposals with the broker's requests instead)."""

    event: IsrUpdated | ProposedIsr
    audited: bool = True
    model_leader: int | None = None
    model_isr: list[int] = []
    model_partition_epoch: int | None = None
    evidence: list[ReplicaView] = []  # the model's record of the replicas the broker's write concerned


class Divergence(Struct, kw_only=True):
    """A disagreement between the model and a broker, with both sides and the model's evidence."""

    ts: int  # the earlier side's time
    cluster: str
    broker: int
    kind: DivergenceKind
    cause: Cause | None = None  # `timing`: the rule that called it so (SPEC §7); null for every other kind
    subject: str  # "isr" (a partition's ISR write) or "propagation" (a batch)
    topic: str | None = None
    partition: int | None = None
    partition_epoch: int | None = None
    model: IsrWrite | Propagation | None = None
    observed: IsrUpdated | IsrChangePropagated | ProposedIsr | None = None
    evidence: list[ReplicaView] = []
    # A shrink: how far past (+) or short of (-) the lag limit the deciding follower was; `timing`: the margin of the
    # rule named by `cause` (SPEC §7: e.g. `in_flight`, how long before the broker's previous write committed).
    margin_ms: int | None = None


class Ordered(Struct, array_like=True, frozen=True):
    """What the propagation book receives from the engine: its first five fields are its `Order`."""

    ts: int
    phase: int
    seq: int
    arrival: int
    half: int

    @property
    def order(self) -> Order:
        return Order(self.ts, self.phase, self.seq, self.arrival, self.half)


class IsrChange(Ordered, frozen=True, tag="c"):
    """A leader ISR write (expand or shrink) to propagate, pending from `ts`; `decided_ms` is when the leader
    decided it, earlier for a check inside an isr-expiration run that sorts at the run's end (None: at `ts`)."""

    cluster: str
    broker: int
    topic: str
    partition: int
    decided_ms: int | None = None

    @property
    def decided(self) -> int:
        return self.ts if self.decided_ms is None else self.decided_ms


class AlterPartitionSubmit(Ordered, frozen=True, tag="s"):
    """A leader's proposal to its AlterPartition manager (DefaultAlterPartitionManager.submit), from `ts`."""

    cluster: str
    broker: int
    topic: str
    partition: int
    kind: DecisionKind
    isr: tuple[int, ...]
    leader_epoch: int
    partition_epoch: int


class AlterPartitionAnswer(Ordered, frozen=True, tag="a"):
    """The controller's answer for one partition of a broker's request, as the leader handled it at `ts`."""

    cluster: str
    broker: int
    topic: str
    partition: int
    error: str | None = None
    isr: tuple[int, ...] | None = None
    partition_epoch: int | None = None
    top_level: bool = False  # the error is the whole request's (`partition.top_level_error`)


class AlterPartitionSendSeen(Ordered, frozen=True, tag="n"):
    """A broker's AlterPartition request as the agent saw it leave (`alter_partition_sent`), at `ts`: its manager's
    clock for the moment its previous response was handled (`AlterPartitionBook`)."""

    cluster: str
    broker: int
    topic: str = ""  # no partition's: sorts before a partition's item at the same order
    partition: int = -1
    carried: tuple[tuple[str, int], ...] | None = None  # its partitions (None: one it could not name)


class PropagationTick(Ordered, frozen=True, tag="t"):
    """An explicit isr-change-propagation run for one cluster, or for one broker of it (the agent's, with the
    broker's throttle state after the run: what the model starts a broker it has not seen from)."""

    cluster: str
    broker: int | None = None
    last_isr_change_ms: int | None = None
    last_propagation_ms: int | None = None
