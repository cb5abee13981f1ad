"""A partition leader's replica bookkeeping (SPEC §1, §4.1-4.5): plain data plus the rules that change it.

The rules carry the names of the Kafka code they restate (`Partition.scala`, `Replica.scala`), so a
reader can grep one against the other: `become_leader_or_follower` and `make_leader`,
`update_follower_fetch_state`, `maybe_expand_isr`, `maybe_shrink_isr`, `maybe_increment_leader_hw`,
and `update_isr`, the one function that writes the ISR. Every rule takes the time it runs at and
writes what it decided into an `Outputs` collector, so the same functions serve the one-shot replay
and every Spark state key.
"""

from __future__ import annotations

from collections import Counter

from msgspec import Struct

from .config import Config
from .events import Append, Fetch, IsrChangePropagated, IsrUpdated, LeaderAndIsr
from .metrics import IGNORED_APPENDS, IGNORED_FETCHES, IGNORED_LEADER_AND_ISR, Metric, counter_key
from .order import Order
from .records import (
    Decision,
    DecisionKind,
    FollowerRecord,
    IsrChange,
    IsrWrite,
    Observation,
    PartitionRecord,
    PropagationTick,
    ReplicaView,
    ShrinkReason,
)
from .schedule import INF, first_at_or_after

PartitionKey = tuple[str, str, int]  # (cluster, topic, partition)


class Follower(Struct, array_like=True, gc=False):
    """The leader's record of one follower (Replica.scala L26-47)."""

    replica: int
    leo: int = -1
    log_start_offset: int = -1
    last_caught_up_ms: int = 0
    last_fetch_leader_leo: int = 0
    last_fetch_ms: int = 0


class Partition(Struct, array_like=True, gc=False):
    """The leader's view of one partition.

    `isr` is kept sorted; `followers` are the records of AR minus the leader, sorted by replica id
    (a short list: it is smaller than a dict and as fast to search at replication factors of 2-5).
    """

    cluster: str
    topic: str
    partition: int
    leader: int | None = None
    leader_epoch: int = -1
    controller_epoch: int = -1
    partition_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    hw: int = 0
    leader_leo: int = 0
    leader_epoch_start_offset: int | None = None
    followers: list[Follower] = []
    min_isr: int | None = None  # the topic's min.insync.replicas as its leader reported it (else the config's)
    audited: bool = False  # its leader reports (the agent): the model's ISR writes are audited against the broker's
    # The start of its leader's isr-expiration run that checked it at an append's `check_ms` (SPEC §4.7): that run's
    # tick, which sorts at the run's end, does not check it again.
    checked_in_run: int | None = None

    def follower(self, replica: int) -> Follower | None:
        for f in self.followers:
            if f.replica == replica:
                return f
        return None

    @property
    def key(self) -> PartitionKey:
        return (self.cluster, self.topic, self.partition)

    @property
    def has_leader(self) -> bool:
        return self.leader is not None and self.leader >= 0


class Outputs:
    """What advancing the state produced: decisions, ISR changes to propagate, ticks, counters."""

    __slots__ = (
        "decisions",
        "changes",
        "ticks",
        "observed",
        "writes",
        "counters",
        "touched",
    )

    def __init__(self) -> None:
        self.decisions: list[Decision] = []
        self.changes: list[IsrChange] = []
        self.ticks: list[PropagationTick] = []
        self.observed: list[Observation | IsrChangePropagated] = []  # what brokers did, with the model's view
        self.writes: list[IsrWrite] = []  # the model's ISR writes of audited partitions, with their evidence
        # What changed nothing, as `kind.reason` (`ignored_fetches.not_follower`): every kind is a counter of
        # `state.metrics`, which the step, the report, the store's tallies and /metrics carry as they are.
        self.counters: Counter[str] = Counter()
        self.touched: set[PartitionKey] = set()

    def ignore(self, kind: Metric, reason: str) -> None:
        """Count an input the rules took and that changed nothing: nothing is dropped silently (SPEC §5)."""
        self.counters[counter_key(kind, reason)] += 1

    def decide(
        self,
        p: Partition,
        ts: int,
        kind: DecisionKind,
        isr_before: tuple[int, ...],
        changed: list[int],
        reasons: dict[str, ShrinkReason] | None = None,
        error: str | None = None,
        run_end_ms: int | None = None,
    ) -> None:
        self.touched.add(p.key)
        decision = Decision(
            ts=ts,
            cluster=p.cluster,
            topic=p.topic,
            partition=p.partition,
            kind=kind,
            leader=p.leader,
            leader_epoch=p.leader_epoch,
            isr_before=list(isr_before),
            isr_after=list(p.isr),
            replicas_changed=changed,
            reasons=reasons or {},
            error=error,
            hw=p.hw,
            leader_leo=p.leader_leo,
        )
        self.decisions.append(decision)
        if p.audited and p.leader is not None and kind in (DecisionKind.SHRINK, DecisionKind.EXPAND):
            self.writes.append(IsrWrite.of(decision, p.partition_epoch, replica_views(p, changed), run_end_ms))

    def observe(self, p: Partition | None, ev: IsrUpdated) -> None:
        """Record a broker's ISR write with the model's view of the partition at that moment."""
        if p is None:
            self.observed.append(Observation(event=ev))
            return
        concerned = [r.replica for r in ev.out_of_sync] or sorted(set(ev.isr) - set(ev.isr_before or ()))
        self.observed.append(
            Observation(
                event=ev,
                model_leader=p.leader,
                model_isr=list(p.isr),
                model_partition_epoch=p.partition_epoch,
                evidence=replica_views(p, concerned),
            )
        )


def replica_views(p: Partition, replicas: list[int]) -> list[ReplicaView]:
    """The model's record of these followers of `p`: the evidence an ISR write is judged on."""
    return [
        ReplicaView(replica=f.replica, leo=f.leo, last_caught_up_ms=f.last_caught_up_ms, last_fetch_ms=f.last_fetch_ms)
        for f in p.followers
        if f.replica in replicas
    ]


def shrink_eligible_at(p: Partition, f: Follower, lag: int) -> int:
    """When an isr-expiration check may first remove `f` from the ISR (INF: it cannot be removed as things stand).

    Replica.isCaughtUp / Partition.isFollowerOutOfSync: out of sync once `now - lastCaughtUpTimeMs > lag`
    (strict), unless the follower is at the leader's LEO (KAFKA-7152) or the partition has no leader.
    The one definition the check, the scheduler's skip-ahead, the partition record and the API share.
    """
    if not p.has_leader or f.leo == p.leader_leo or f.replica not in p.isr:
        return INF
    return f.last_caught_up_ms + lag + 1


def maybe_increment_leader_hw(p: Partition, now: int, config: Config) -> None:
    """Partition.maybeIncrementLeaderHW: the HW follows the slowest replica that may still be in sync.

    The candidates are the same from 2.x to 3.9 in ZooKeeper mode (SPEC §4.8): 3.6's shouldWaitForReplicaToJoinIsr
    adds only ZkMetadataCache.hasAliveBroker, which no event reports, and isCaughtUp's `leo == leader LEO` cannot
    hold for a replica behind the candidate.
    """
    if config.rules.under_min_isr_holds_hw and is_under_min_isr(p, config):
        return  # 3.7: Partition@3.9.0-rc3 L1167-1170 (KAFKA-15583)
    lag = config.replica_lag_time_max_ms
    new = p.leader_leo
    isr = p.isr
    for f in p.followers:
        leo = f.leo
        if leo < new and (now - f.last_caught_up_ms <= lag or f.replica in isr):
            new = leo
    if new > p.hw:
        p.hw = new


def topic_min_isr(p: Partition, config: Config) -> int:
    """The min ISR of 2.x to 3.6: the topic's min.insync.replicas as it is (the leader's LogConfig, as the leader
    reported it, else the config's), even above the replication factor. isUnderMinIsr and isAtMinIsr compare the
    ISR size with `_.config.minInSyncReplicas` (Partition@2.5.0 L242-244, Partition@3.6.0 L361-365)."""
    return config.min_isr(p.topic) if p.min_isr is None else p.min_isr


def effective_min_isr(p: Partition, config: Config) -> int:
    """The min ISR of 3.7+: Partition.effectiveMinIsr, the topic's min.insync.replicas at most the replication
    factor, `minInSyncReplicas.min(remoteReplicasMap.size + 1)` (Partition@3.7.0 L369-371, Partition@3.9.0-rc3
    L381-383); isUnderMinIsr, isAtMinIsr and so the 3.7 HW gate compare with it (3.7.0 L360-362, L377)."""
    return min(topic_min_isr(p, config), len(p.replicas) or 1)


def min_isr(p: Partition, config: Config) -> int:
    """The min ISR the leader's rule set compares the ISR size with (`KafkaRules.effective_min_isr`, SPEC §4.8):
    the one value the HW rule and the partition record's `under_min_isr` / `at_min_isr` read."""
    return effective_min_isr(p, config) if config.rules.effective_min_isr else topic_min_isr(p, config)


def is_under_min_isr(p: Partition, config: Config) -> bool:
    """Partition.isUnderMinIsr: the ISR is smaller than the rule set's min ISR."""
    return len(p.isr) < min_isr(p, config)


def update_isr(p: Partition, isr: tuple[int, ...], now: int, at: Order, out: Outputs) -> None:
    """Partition.updateIsr (ZooKeeper mode): the leader writes the new ISR, decided at `now`, the write bumps the
    zkVersion (`partition_epoch`), and ReplicaManager.recordIsrChange puts the partition in the leader's pending set
    (from `at`)."""
    assert p.leader is not None
    p.isr = isr
    p.partition_epoch += 1
    decided = None if now == at.ts else now
    out.changes.append(IsrChange(*at, p.cluster, p.leader, p.topic, p.partition, decided))


def become_leader_or_follower(p: Partition, ev: LeaderAndIsr, config: Config, out: Outputs) -> None:
    """ReplicaManager.becomeLeaderOrFollower: the epoch guards, then `make_leader` for an accepted state.

    A state reported by a broker (the agent) counts once: a live partition's from its new leader (another
    replica's copy is `follower_copy`), an offline one's from the first replica that reports it (the others,
    the same state again, are `duplicate`). Neither is a decision: one request must not become many.
    """
    if ev.broker is not None:
        if ev.leader >= 0 and ev.broker != ev.leader:
            out.ignore(IGNORED_LEADER_AND_ISR, "follower_copy")
            return
        if _same_state(p, ev):
            out.ignore(IGNORED_LEADER_AND_ISR, "duplicate")
            return
    if ev.controller_epoch < p.controller_epoch:
        out.decide(p, ev.ts, DecisionKind.REJECTED, p.isr, [], error="STALE_CONTROLLER_EPOCH")
        return
    p.controller_epoch = ev.controller_epoch
    if ev.leader_epoch <= p.leader_epoch:
        out.decide(p, ev.ts, DecisionKind.REJECTED, p.isr, [], error="STALE_CONTROLLER_EPOCH")
        return
    if ev.leader >= 0 and ev.leader not in ev.replicas:
        out.decide(p, ev.ts, DecisionKind.REJECTED, p.isr, [], error="UNKNOWN_TOPIC_OR_PARTITION")
        return
    make_leader(p, ev, config, out)


def _same_state(p: Partition, ev: LeaderAndIsr) -> bool:
    return (p.leader, p.leader_epoch, p.partition_epoch, p.controller_epoch, p.replicas, p.isr) == (
        ev.leader,
        ev.leader_epoch,
        ev.partition_epoch,
        ev.controller_epoch,
        tuple(ev.replicas),
        tuple(sorted(set(ev.isr))),
    )


def make_leader(p: Partition, ev: LeaderAndIsr, config: Config, out: Outputs) -> None:
    """Partition.makeLeader: take the controller's state verbatim and reset the follower records."""
    isr_before = p.isr
    new_leader = ev.leader != p.leader
    leader_leo = p.leader_leo if ev.leader_leo is None else ev.leader_leo
    isr = tuple(sorted(set(ev.isr)))
    p.leader = ev.leader
    p.leader_epoch = ev.leader_epoch
    p.partition_epoch = ev.partition_epoch
    p.replicas = tuple(ev.replicas)
    p.isr = isr
    p.leader_leo = leader_leo
    p.leader_epoch_start_offset = leader_leo
    followers: list[Follower] = []
    for replica in sorted(ev.replicas):
        if replica == ev.leader:
            continue
        f = (None if new_leader else p.follower(replica)) or Follower(replica)
        if new_leader:
            f.leo = -1
            f.log_start_offset = -1
            f.last_fetch_leader_leo = -1
            f.last_fetch_ms = 0
        else:
            f.last_fetch_leader_leo = leader_leo
            # 3.3: Replica.resetReplicaState (Replica@3.9.0-rc3 L181): 0 for a follower outside the ISR.
            f.last_fetch_ms = ev.ts if replica in isr or not config.rules.reset_replica_state else 0
        f.last_caught_up_ms = ev.ts if replica in isr else 0
        followers.append(f)
    p.followers = followers
    if ev.hw is not None:
        p.hw = ev.hw
    if ev.min_insync_replicas is not None:
        p.min_isr = ev.min_insync_replicas
    p.audited = ev.broker is not None
    maybe_increment_leader_hw(p, ev.ts, config)
    changed = sorted(set(isr_before).symmetric_difference(isr))
    out.decide(p, ev.ts, DecisionKind.LEADER_AND_ISR, isr_before, changed)


def _inactive(p: Partition | None, ev: Fetch | Append) -> str | None:
    """Why a fetch or append is ignored before it is read: no accepted LeaderAndIsr yet, offline, or reported by
    a broker (the agent) that is not the partition's leader (an old leader's last events, its clock skewed)."""
    if p is None or p.leader_epoch < 0:
        return "no_leader_and_isr"
    if p.leader == -1:
        return "offline"
    if ev.broker is not None and ev.broker != p.leader:
        return "not_leader"
    return None


def update_follower_fetch_state(p: Partition | None, ev: Fetch, config: Config, out: Outputs) -> None:
    """Partition.updateFollowerFetchState: Replica.updateFetchState, then maybeExpandIsr, then the HW.

    A fetch Kafka would have refused changes nothing and is counted by reason: no leader yet or offline,
    not from a follower (ReplicaManager L1567-1572), a stale leader epoch (KAFKA-8400), or an offset past
    the leader's LEO (OFFSET_OUT_OF_RANGE).
    """
    inactive = _inactive(p, ev)
    if inactive:
        out.ignore(IGNORED_FETCHES, inactive)
        return
    assert p is not None
    f = p.follower(ev.replica)
    if f is None:
        out.ignore(IGNORED_FETCHES, "not_follower")
        return
    if ev.current_leader_epoch is not None and ev.current_leader_epoch != p.leader_epoch:
        out.ignore(IGNORED_FETCHES, "leader_epoch_mismatch")
        return
    offset = ev.fetch_offset
    leader_leo = ev.leader_leo
    if offset > leader_leo:
        out.ignore(IGNORED_FETCHES, "offset_out_of_range")
        return
    t = ev.ts
    if leader_leo > p.leader_leo:
        p.leader_leo = leader_leo
        if p.audited:
            # Records a broker took without an `append` (the agent reports appends only at isr-expiration runs):
            # Kafka's appendRecordsToLeader ran the HW rule when it took them, before this fetch read them
            # (Partition.scala 3.9 L1365-1383), with the followers as they were: the HW may move first (SPEC §4.7).
            maybe_increment_leader_hw(p, t, config)
    if offset >= leader_leo:
        if t > f.last_caught_up_ms:
            f.last_caught_up_ms = t
    elif offset >= f.last_fetch_leader_leo and f.last_fetch_ms > f.last_caught_up_ms:
        f.last_caught_up_ms = f.last_fetch_ms
    leo_changed = f.leo != offset
    f.leo = offset
    if ev.log_start_offset is not None:
        f.log_start_offset = ev.log_start_offset
    if leader_leo > f.last_fetch_leader_leo or not config.rules.max_last_fetch_leader_log_end_offset:
        f.last_fetch_leader_leo = leader_leo  # 3.3: the max of both (Replica@3.9.0-rc3 L138)
    f.last_fetch_ms = t
    expanded = maybe_expand_isr(p, f, ev, config, out)
    if leo_changed:
        maybe_increment_leader_hw(p, t, config)
    if expanded is not None:
        out.decide(p, t, DecisionKind.EXPAND, expanded, [f.replica])


def maybe_expand_isr(p: Partition, f: Follower, ev: Fetch, config: Config, out: Outputs) -> tuple[int, ...] | None:
    """Partition.maybeExpandIsr: a follower outside the ISR rejoins once it reached the HW and the current
    leader epoch's start offset (no lag-time condition). Returns the ISR before the write, None if none."""
    isr = p.isr
    start = p.leader_epoch_start_offset
    if f.replica in isr or f.leo < p.hw or start is None or f.leo < start:
        return None
    update_isr(p, tuple(sorted([*isr, f.replica])), ev.ts, Order.of_event(ev), out)
    if config.rules.hw_after_isr_update:  # 3.1: handleAlterPartitionUpdate (Partition@3.9.0-rc3 L1980)
        maybe_increment_leader_hw(p, ev.ts, config)
    return isr


def append_to_leader(p: Partition | None, ev: Append, config: Config, out: Outputs) -> None:
    """Partition.appendRecordsToLeader: the leader's LEO only grows; a new LEO may let the HW move."""
    inactive = _inactive(p, ev)
    if inactive:
        out.ignore(IGNORED_APPENDS, inactive)
        return
    assert p is not None
    if ev.leader_leo > p.leader_leo:
        p.leader_leo = ev.leader_leo
    maybe_increment_leader_hw(p, ev.ts, config)
    if ev.check_ms is not None and p.audited:
        # The agent's append is the LEO this partition's check read, at `check_ms`, during the run that started at
        # `ts`: the check is here, after the fetches applied before it and before those applied after it.
        maybe_shrink_isr(p, ev.check_ms, config, out, Order.of_event(ev))
        p.checked_in_run = ev.ts


def maybe_shrink_isr(
    p: Partition, now: int, config: Config, out: Outputs, at: Order, run_end_ms: int | None = None
) -> int:
    """Partition.maybeShrinkIsr at `now`; returns when the next remaining ISR follower becomes eligible.
    `run_end_ms`: the end of the broker's run that checks it (the agent), for the audit.

    Each removed follower gets the reason Kafka's getOutOfSyncReplicas comment names: stuck (no fetch
    for more than the lag) or slow (fetching, but not caught up within it).
    """
    if not p.has_leader:
        return INF
    lag = config.replica_lag_time_max_ms
    next_eligible = INF
    expired: dict[str, ShrinkReason] = {}
    for f in p.followers:
        eligible = shrink_eligible_at(p, f, lag)
        if eligible <= now:
            expired[str(f.replica)] = ShrinkReason.STUCK if now - f.last_fetch_ms > lag else ShrinkReason.SLOW
        elif eligible < next_eligible:
            next_eligible = eligible
    if expired:
        isr_before = p.isr
        update_isr(p, tuple(r for r in isr_before if str(r) not in expired), now, at, out)
        maybe_increment_leader_hw(p, now, config)
        changed = sorted(int(r) for r in expired)
        out.decide(p, now, DecisionKind.SHRINK, isr_before, changed, reasons=expired, run_end_ms=run_end_ms)
    return next_eligible


def next_shrink_eligible_at(p: Partition, lag: int) -> int:
    """The earliest time an isr-expiration check could remove any follower of `p` (INF: none can be)."""
    return min((shrink_eligible_at(p, f, lag) for f in p.followers), default=INF)


def partition_record(p: Partition, config: Config) -> PartitionRecord:
    """The SPEC §5 partition state record: §1 fields, health flags, and each follower with its shrink outlook."""
    lag = config.replica_lag_time_max_ms
    isr = p.isr
    followers = []
    for f in p.followers:
        at = shrink_eligible_at(p, f, lag)
        eligible = None if at >= INF else at
        scheduled = (
            INF
            if eligible is None
            else first_at_or_after(eligible, config.schedule_origin_ms, config.expiration_interval_ms)
        )
        followers.append(
            FollowerRecord(
                replica=f.replica,
                leo=f.leo,
                log_start_offset=f.log_start_offset,
                last_caught_up_ms=f.last_caught_up_ms,
                last_fetch_leader_leo=f.last_fetch_leader_leo,
                last_fetch_ms=f.last_fetch_ms,
                in_sync=f.replica in isr,
                lag_offsets=p.leader_leo - f.leo if f.leo >= 0 else None,
                shrink_eligible_at_ms=eligible,
                predicted_shrink_at_ms=None if scheduled >= INF else scheduled,
            )
        )
    floor = min_isr(p, config)
    return PartitionRecord(
        cluster=p.cluster,
        topic=p.topic,
        partition=p.partition,
        leader=p.leader,
        leader_epoch=p.leader_epoch,
        controller_epoch=p.controller_epoch,
        partition_epoch=p.partition_epoch,
        replicas=list(p.replicas),
        isr=list(isr),
        hw=p.hw,
        leader_leo=p.leader_leo,
        leader_epoch_start_offset=p.leader_epoch_start_offset,
        offline=p.leader == -1,
        under_replicated=len(isr) < len(p.replicas),
        under_min_isr=len(isr) < floor,
        at_min_isr=len(isr) == floor,  # Partition.isAtMinIsr
        followers=followers,
    )
