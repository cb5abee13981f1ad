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
from collections.abc import Mapping
from typing import Any, Literal, Protocol

from msgspec import Struct
from msgspec.structs import replace

from .config import Config
from .events import (
    AlterPartitionResponse,
    AlterPartitionSent,
    Append,
    BrokerObserved,
    BrokerRegistration,
    Fetch,
    IsrUpdated,
    LeaderAndIsr,
    ProposedPartition,
)
from .metrics import (
    FAILED_ISR_UPDATES,
    IGNORED_ALTER_PARTITION_RESPONSES,
    IGNORED_APPENDS,
    IGNORED_FETCHES,
    IGNORED_LEADER_AND_ISR,
    Metric,
    counter_key,
)
from .order import Order
from .records import (
    AlterPartitionAnswer,
    AlterPartitionSendSeen,
    AlterPartitionSubmit,
    Decision,
    DecisionKind,
    FollowerRecord,
    Health,
    IsrChange,
    IsrState,
    IsrWrite,
    Observation,
    PartitionHealth,
    PartitionRecord,
    PropagationTick,
    ProposedIsr,
    ReplicaView,
    Shown,
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
    broker_epoch: int | None = None  # KRaft: the broker epoch its last fetch carried (Replica's brokerEpoch)


class Registration(Struct, array_like=True, gc=False):
    """A broker as the leader's KRaft metadata has it (`broker_registration`): what lets it join an ISR."""

    epoch: int
    fenced: bool
    in_controlled_shutdown: bool


Metadata = Mapping[int, Registration]  # one cluster's registrations by broker id
NO_METADATA: Metadata = {}  # ZooKeeper mode, or none reported: every assigned broker counts as alive


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
    # tick, which sorts at the run's end, does not check it again, nor, reporting that end, does any (`tick_checks`).
    checked_in_run: int | None = None
    # The leader's ISR change in flight (SPEC §4.9): `isr` stays the committed ISR while `isr_state` is pending, and
    # `proposed_isr` is the ISR sent (Partition.scala's PendingExpandIsr / PendingShrinkIsr.sentLeaderAndIsr).
    isr_state: IsrState = IsrState.COMMITTED
    proposed_isr: tuple[int, ...] = ()
    pending_since_ms: int | None = None
    # The brokers whose AlterPartition managers still hold an item for it: submitted, not answered (each broker's
    # unsentIsrUpdates): a new leader's manager holds nothing of what an old leader proposed, and an old leader's
    # still holds its item if the leadership comes back before the answer. The one owner of "is an item held"
    # (`submit_alter_partition`); the managers' book (`state.alter_partition`) takes every submit it lets through.
    held_by: tuple[int, ...] = ()
    elr: tuple[int, ...] | None = None
    last_known_elr: tuple[int, ...] | None = None
    leader_recovery_state: str | None = None
    alter_partition: bool = False  # its leader proposes with AlterPartition (for its record)
    # Its leader reports its ISR writes (the agent): it reported one (`isr_updated`), or its ticks name its ISR
    # protocol (`leader_reports_writes`).
    writes_reported: bool = False
    # The controller committed the proposal in flight (a success answer) and the leader's Partition has not applied
    # it yet: it will, by the response path (`isr_updated`) or the metadata path (`leader_and_isr`): `applies_answer`.
    answered: bool = False
    # The broker's item of the partition its manager holds, as its last request carried it: (broker, leader epoch,
    # base partition epoch, proposed ISR). A request that carries it again is a resend (`resends_item`).
    sent_item: tuple[int, int, int, tuple[int, ...]] | None = None
    # Its leader hosts it: False from the leader's restart until it applies its metadata again (`forget_partition`).
    hosted: bool = True
    # The committed ISR the current partition epoch replaced, with its epoch (`commit_isr`): what a leader's proposal
    # from that epoch was based on (`observe_alter_partition_sent`).
    previous_isr: tuple[int, tuple[int, ...]] | None = None
    shown: Shown | None = None  # what its stored row shows (`records.row_due`): the state key writes it when due
    # ZooKeeper mode: the leader's write (partition epoch, ISR) reported before the model decided it (`reported_ahead`)
    reported_ahead: tuple[int, tuple[int, ...]] | None = None

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
        "alter_partition",
        "counters",
        "touched",
        "states",
        "registrations",
        "resyncs",
        "ahead",
        "exact",
    )

    def __init__(self) -> None:
        self.decisions: list[Decision] = []
        self.changes: list[IsrChange] = []
        self.ticks: list[PropagationTick] = []
        self.observed: list[Observation | BrokerObserved] = []  # what brokers did, with the model's view
        self.writes: list[IsrWrite] = []  # the model's ISR writes of audited partitions, with their evidence
        # Leaders' AlterPartition proposals and the answers they handled, for their brokers' managers (§4.9).
        self.alter_partition: list[AlterPartitionSubmit | AlterPartitionAnswer | AlterPartitionSendSeen] = []
        # What changed nothing, as `kind.reason` (`ignored_fetches.not_follower`): every kind is a counter of
        # `state.metrics`, which the step, the report, the store's tallies and /metrics carry as they are.
        self.counters: Counter[str] = Counter()
        self.touched: set[PartitionKey] = set()
        self.states: list[PartitionHealth] = []  # partitions' health where a decision or a commit may change it
        self.registrations: list[BrokerRegistration] = []  # the KRaft registrations brokers reported (once per stream)
        # (cluster, topic, partition, ts) of the LeaderAndIsr decisions of audited partitions: each gives both sides
        # of the audit the controller's state (`Audit.add`); a partition no broker reports on costs the audit nothing.
        self.resyncs: list[tuple[str, str, int, int]] = []
        # Per partition the scheduler applied past its cluster's frontier (`PartitionEngine.advance`): the sort time of
        # its last event applied so, and the event time its state is exact at.
        self.ahead: dict[PartitionKey, int] = {}
        self.exact: dict[PartitionKey, int] = {}

    def count(self, kind: Metric, reason: str) -> None:
        """Count under `kind.reason` an input the rules took and that changed nothing, or an ISR update that failed:
        nothing is dropped silently (SPEC §5)."""
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
            isr_after=list(p.proposed_isr if kind in _PROPOSALS and p.isr_state is not IsrState.COMMITTED else p.isr),
            replicas_changed=changed,
            reasons=reasons or {},
            error=error,
            hw=p.hw,
            leader_leo=p.leader_leo,
        )
        self.decisions.append(decision)
        if p.audited and kind is DecisionKind.LEADER_AND_ISR and p.has_leader:
            self.resyncs.append((p.cluster, p.topic, p.partition, ts))
        if p.audited and p.leader is not None and kind in _PROPOSALS:
            # The epoch the write creates: a write in flight creates the next one (SPEC §4.9).
            epoch = p.partition_epoch + (p.isr_state is not IsrState.COMMITTED)
            self.writes.append(IsrWrite.of(decision, epoch, replica_views(p, changed), run_end_ms))

    def observe(self, p: Partition | None, ev: IsrUpdated | ProposedIsr, audited: bool = True) -> None:
        """Record a broker's ISR write or proposal with the model's view of the partition at that moment."""
        if p is None:
            self.observed.append(Observation(event=ev, audited=audited))
            return
        if isinstance(ev, IsrUpdated):
            concerned = [r.replica for r in ev.out_of_sync] or sorted(set(ev.isr) - set(ev.isr_before or ()))
        else:  # a proposal: the followers it adds or removes
            concerned = sorted(set(ev.isr) ^ set(ev.isr_before or ev.isr))
        self.observed.append(
            Observation(
                event=ev,
                audited=audited,
                model_leader=p.leader,
                model_isr=list(p.isr),
                model_partition_epoch=p.partition_epoch,
                evidence=replica_views(p, concerned),
            )
        )


_PROPOSALS = (DecisionKind.SHRINK, DecisionKind.EXPAND)


class PartitionLookup(Protocol):
    """A state key's partitions by key (a dict, or `paged.Partitions`)."""

    def get(self, key: PartitionKey, /) -> Partition | None: ...


def observe_alter_partition_sent(
    partitions: PartitionLookup, ev: AlterPartitionSent, out: Outputs, record: bool = True
) -> None:
    """A leader's AlterPartition request (SPEC §7): observed as it came, for every key's audit (`Audit.settles_at`;
    recorded for its managers by one state key only, `record`, as every key gets it: `recorded`), and the proposal
    of each partition held here observed for the audit as the broker's decision, with the model's committed state:
    its kind against the committed ISR it is based on (the model's at the request's base partition epoch,
    `based_on_isr`; else the model's current one)."""
    out.observed.append(replace(ev, arrival=0))  # its input position is no part of the record
    if record:
        named = [(proposed.topic, proposed.partition) for proposed in ev.partitions if proposed.topic is not None]
        carried = tuple(named) if len(named) == len(ev.partitions) else None
        out.alter_partition.append(AlterPartitionSendSeen(*Order.of_event(ev), ev.cluster, ev.broker, carried=carried))
    for proposed in ev.partitions:
        p = None if proposed.topic is None else partitions.get((ev.cluster, proposed.topic, proposed.partition))
        if p is None:  # another key's partition, or one the broker could not name
            continue
        based_on = based_on_isr(p, proposed.partition_epoch)
        isr = sorted(set(proposed.isr))
        # Against the ISR it is based on; when the model is at another epoch, against its current ISR, but a
        # proposal of every replica can only add one (a shrink removes at least one): the KRaft lab's leader
        # re-proposed its expand from the epoch before the one the metadata had just given the model.
        grows = len(isr) > len(p.isr if based_on is None else based_on) or (
            based_on is None and isr == sorted(p.replicas)
        )
        kind: Literal["shrink", "expand"] = "expand" if grows else "shrink"
        before = None if based_on is None else list(based_on)
        epochs = (proposed.leader_epoch, proposed.partition_epoch + 1)
        proposal = ProposedIsr(ev.ts, ev.cluster, p.topic, p.partition, ev.broker, *epochs, kind, isr, before)
        new = not resends_item(p, ev.broker, proposed.leader_epoch, proposed.partition_epoch, isr)
        out.observe(p, proposal, audited=new)
        if new and proposed_after_the_metadata(p, ev.broker, proposed):
            hold_pending(p, IsrState.PENDING_EXPAND if grows else IsrState.PENDING_SHRINK, tuple(isr), ev.ts)
            out.touched.add(p.key)  # its row shows the change in flight


def proposed_after_the_metadata(p: Partition, broker: int, item: ProposedPartition) -> bool:
    """The leader sends a new item of `p` from the model's committed leader and partition epochs while the model's
    own proposal was dropped by new metadata of that epoch (`drops_pending`: committed, its manager's item still
    held). The broker made this proposal after that metadata, so its Partition holds it pending: a fetch's expand is
    checked under the read lock, then prepared under the write lock it waits for (maybeExpandIsr, Partition.scala@4.4
    L876-893, after updateFetchStateOrThrow L781-789, where the agent stamps the fetch), and a makeLeader may take
    that lock in between. Until the Partition applies the answer (handleAlterPartitionUpdate L1794-1820, `isr_updated`:
    only to the proposal still pending, L1698-1703), ms to tens of ms after the manager took it out
    (DefaultAlterPartitionManager@4.4 L266-270), a fetch or check changes nothing (`isInflight`, L877, L902, L1091).
    Seen on the KRaft 4.4.0 lab (docs/evidence/kraft-expand-race: the metadata at 18.428, the expand submitted at
    18.546) and in CI, where a fetch between the answer and its application expanded in the model only
    (docs/evidence/kraft-answer-in-flight). A proposal made before the metadata, which dropped it in Kafka too (its
    answer is ignored), was sent before it, unless it queued behind a request in flight (the manager sends one at a
    time): the events cannot tell that one apart, and the audit calls the leader's next proposal from the old epoch
    `reproposed`."""
    return (
        broker == p.leader
        and p.isr_state is IsrState.COMMITTED
        and broker in p.held_by
        and item.leader_epoch == p.leader_epoch
        and item.partition_epoch == p.partition_epoch
    )


def recorded(observed: list[Observation | BrokerObserved], owns_ticks: bool) -> list[Observation | BrokerObserved]:
    """What of a state key's observations goes on to be recorded: every key observes a request for its own audit
    (`observe_alter_partition_sent`), the key that owns the ticks alone records it."""
    return observed if owns_ticks else [o for o in observed if type(o) is not AlterPartitionSent]


def based_on_isr(p: Partition, partition_epoch: int) -> tuple[int, ...] | None:
    """The committed ISR at `partition_epoch` as the model knows it: the current one, or the one the current epoch
    replaced. A KRaft leader may propose from the epoch before the model's: on the lab it re-proposed payments-0
    [1, 3] from epoch 3 after the metadata committed that ISR as epoch 4 (the controller refused it,
    INVALID_UPDATE_VERSION); judged against the current [1, 3] it looked like a shrink (different_isr)."""
    if p.partition_epoch == partition_epoch:
        return p.isr
    if p.previous_isr is not None and p.previous_isr[0] == partition_epoch:
        return p.previous_isr[1]
    return None


def resends_item(p: Partition, broker: int, leader_epoch: int, partition_epoch: int, isr: list[int]) -> bool:
    """Whether a request carries the partition's item the broker's manager already sent and still holds: after a
    top-level error (`top_level_error`) the manager keeps its items and sends them again, with whatever was queued
    meanwhile, 50 ms later or at the next submit (DefaultAlterPartitionManager@4.4 L118-124, L170-175; 3.9.0-rc3
    L172-180, L224-231): the same proposal, no new decision of the leader, so the audit does not pair it again. Only
    the partition's own answer takes the item out (`handle_alter_partition_response`); a proposal after it, even an
    identical one, is new."""
    item = (broker, leader_epoch, partition_epoch, tuple(isr))
    if p.sent_item == item:
        return True
    p.sent_item = item
    return False


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
    The one definition the check, the scheduler's skip-ahead, the partition record and the API share. While an ISR
    change is in flight no follower is out of sync (getOutOfSyncReplicas, Partition@3.9.0-rc3 L1309-1312).
    """
    if not p.has_leader or f.leo == p.leader_leo or f.replica not in p.isr or p.isr_state is not IsrState.COMMITTED:
        return INF
    return f.last_caught_up_ms + lag + 1


def maybe_increment_leader_hw(p: Partition, now: int, config: Config, brokers: Metadata = NO_METADATA) -> None:
    """Partition.maybeIncrementLeaderHW: the HW follows the slowest replica that may still be in sync.

    The candidates are the maximal ISR's (Partition@3.9.0-rc3 L1185: a pending expand's new replica counts) and the
    caught-up outsiders. In ZooKeeper mode those are the same from 2.x to 3.9 (SPEC §4.8): 3.6's
    shouldWaitForReplicaToJoinIsr adds only ZkMetadataCache.hasAliveBroker, which no event reports, and
    isCaughtUp's `leo == leader LEO` cannot hold for a replica behind the candidate; with KRaft metadata an outsider
    must also be eligible to join (`is_replica_isr_eligible`, L1178-1181). The 3.7 gate reads the committed ISR.
    """
    if config.rules.under_min_isr_holds_hw and is_under_min_isr(p, config):
        return  # 3.7: Partition@3.9.0-rc3 L1167-1170 (KAFKA-15583)
    lag = config.replica_lag_time_max_ms
    new = p.leader_leo
    isr = maximal_isr(p)
    for f in p.followers:
        leo = f.leo
        if leo < new and (
            (now - f.last_caught_up_ms <= lag and (not brokers or is_replica_isr_eligible(f, brokers)))
            or f.replica in isr
        ):
            new = leo
    if new > p.hw:
        p.hw = new


def maximal_isr(p: Partition) -> tuple[int, ...]:
    """Partition.scala's maximalIsr (Partition@3.9.0-rc3 L222, L244, L264): the committed ISR, plus the replica a
    pending expand adds (a pending shrink keeps the committed one: its removal may fail)."""
    return p.proposed_isr if p.isr_state is IsrState.PENDING_EXPAND else p.isr


def acting_brokers(p: Partition) -> frozenset[int]:
    """The brokers whose own streams can still change `p` (SPEC §6, a partition's frontier): its leader, whose agent
    reports its fetches, appends, writes and answers; the members of its (maximal) ISR and ELR, from which a clean
    election picks the next leader, who reports its new state (KRaft: PartitionChangeBuilder@4.4 L318-321
    isValidNewLeader, the ISR or, when it is empty, the ELR; unclean, any live replica, L256-316; ZooKeeper:
    Election.scala@3.9.0-rc3 L28-45, the ISR unless unclean election is enabled); the brokers whose AlterPartition
    managers hold its item, and the one whose request carried it (`forget_partition`: their restart changes `p`); the
    engine adds a deposed leader until it reports the new state (`PartitionEngine.acting_brokers`): until then it
    may report as the leader. A partition without a leader (offline, or no state yet) may be reported by any of its
    replicas. Another replica reports nothing of `p` that changes it: a follower's copy of its state only counts
    (`follower_copy`), and it can lead `p` only through an unclean election (`frontier.behind_partition`)."""
    if p.leader is None or p.leader < 0:
        return frozenset(p.replicas)
    acting = {p.leader, *p.isr, *maximal_isr(p), *p.held_by, *(p.elr or ()), *(p.last_known_elr or ())}
    if p.sent_item is not None:
        acting.add(p.sent_item[0])
    return frozenset(acting)


def is_replica_isr_eligible(f: Follower, brokers: Metadata) -> bool:
    """Partition.isReplicaIsrEligible (Partition@3.9.0-rc3 L1060-1093): with KRaft metadata, a replica may join the
    ISR only when its broker is not fenced, not in controlled shutdown, and the broker epoch its fetch carried is
    the metadata's (or -1, or none: a fetch that does not say). ZooKeeper mode asks only whether the broker is alive,
    which no event reports: a broker the leader has no registration of counts as alive."""
    registration = brokers.get(f.replica)
    if registration is None:
        return True
    epoch = f.broker_epoch
    return (
        not registration.fenced
        and not registration.in_controlled_shutdown
        and (epoch is None or epoch == -1 or epoch == registration.epoch)
    )


def leader_reports_writes(p: Partition) -> None:
    """`p`'s leader names its ISR protocol on its ticks: an agent that does reports every ISR write (`isr_updated`),
    so from the first one the model holds a ZooKeeper write in flight until it commits. Knowing it only from the
    partition's first report missed that first write: on the lab a resumed leader's first shrink of a partition took
    1.9 s to reach ZooKeeper (its session reconnecting), and the model expanded meanwhile where Kafka could not
    (the partition was pending, Partition@3.9.0-rc3 L1023)."""
    p.writes_reported = True


def writes_in_flight(p: Partition, config: Config) -> bool:
    """Whether `p`'s ISR changes stay pending until they commit (SPEC §4.9): every AlterPartition proposal until its
    response; in ZooKeeper mode 3.1+'s write outside the partition's lock (`isr_write_in_flight`) until the leader
    reports its commit (`isr_updated`), once the model knows the leader reports its writes (`writes_reported`): then it
    will hear of the commit. Without the agent a write takes no time."""
    return config.alter_partition or (config.rules.isr_write_in_flight and p.audited and p.writes_reported)


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


def commit_isr(p: Partition, isr: tuple[int, ...], partition_epoch: int) -> None:
    """The committed ISR and partition epoch become `isr` at `partition_epoch`; a new epoch keeps the one it replaced
    (`previous_isr`)."""
    if partition_epoch != p.partition_epoch:
        p.previous_isr = (p.partition_epoch, p.isr)
    p.isr = isr
    p.partition_epoch = partition_epoch


def update_isr(p: Partition, isr: tuple[int, ...], now: int, at: Order, out: Outputs) -> None:
    """Partition.updateIsr (ZooKeeper mode): the leader writes the new ISR, decided at `now`, the write bumps the
    zkVersion (`partition_epoch`), and ReplicaManager.recordIsrChange puts the partition in the leader's pending set
    (from `at`)."""
    commit_isr(p, isr, p.partition_epoch + 1)
    record_isr_change(p, now, at, out)


def record_isr_change(p: Partition, now: int, at: Order, out: Outputs) -> None:
    """ReplicaManager.recordIsrChange: the leader's ISR write, decided at `now`, is pending propagation from `at`."""
    assert p.leader is not None
    decided = None if now == at.ts else now
    out.changes.append(IsrChange(*at, p.cluster, p.leader, p.topic, p.partition, decided))


def prepare_isr_change(
    p: Partition, state: IsrState, isr: tuple[int, ...], now: int, at: Order, config: Config, out: Outputs
) -> bool:
    """Partition.prepareIsrExpand / prepareIsrShrink (Partition@3.9.0-rc3 L1765-1815): the leader's proposal is
    pending from `now`, based on its current leader and partition epochs. With AlterPartition it goes to the
    broker's manager (`submit_alter_partition`; False: refused at once, the partition is committed again); in
    ZooKeeper mode the write is in flight until the leader reports its commit (`commit_isr_write`)."""
    hold_pending(p, state, isr, now)
    if config.alter_partition:
        return submit_alter_partition(p, at, out)
    record_isr_change(p, now, at, out)
    return True


def hold_pending(p: Partition, state: IsrState, isr: tuple[int, ...], now: int) -> None:
    """`partitionState = PendingExpandIsr / PendingShrinkIsr` (Partition@3.9.0-rc3 L1765-1815): `isr` is in flight
    from `now`, the committed ISR unchanged until its answer or new metadata (`revert_isr_change`)."""
    p.isr_state = state
    p.proposed_isr = isr
    p.pending_since_ms = now


def submit_alter_partition(p: Partition, at: Order, out: Outputs) -> bool:
    """DefaultAlterPartitionManager.submit (AlterPartitionManager@3.9.0-rc3 L155-170): one item per partition, as
    `unsentIsrUpdates.putIfAbsent` keeps it (L162-167); the partition owns that map's entry for itself (`held_by`),
    so the managers' book does not check it again. While the manager still holds the partition's previous item (sent
    before new metadata moved the partition on, not answered yet: items leave it only with their answer, L364) the
    new one fails at once with OPERATION_NOT_ATTEMPTED, which reverts the partition to its committed state
    (Partition@3.9.0-rc3 L1898-1910)."""
    assert p.leader is not None
    if p.leader in p.held_by:
        revert_isr_change(p)
        out.count(FAILED_ISR_UPDATES, "OPERATION_NOT_ATTEMPTED")
        return False
    p.held_by = (*p.held_by, p.leader)
    kind = DecisionKind.EXPAND if p.isr_state is IsrState.PENDING_EXPAND else DecisionKind.SHRINK
    out.alter_partition.append(
        AlterPartitionSubmit(
            *at, p.cluster, p.leader, p.topic, p.partition, kind, p.proposed_isr, p.leader_epoch, p.partition_epoch
        )
    )
    return True


def revert_isr_change(p: Partition) -> None:
    """`partitionState = proposedIsrState.lastCommittedState` (Partition@3.9.0-rc3 L1909), or new metadata's
    CommittedPartitionState (updateAssignmentAndIsr, L1004): nothing is pending any more."""
    p.isr_state = IsrState.COMMITTED
    p.proposed_isr = ()
    p.pending_since_ms = None
    p.answered = False


def commit_isr_change(
    p: Partition, isr: tuple[int, ...], partition_epoch: int, now: int, config: Config, brokers: Metadata
) -> None:
    """Partition.handleAlterPartitionUpdate (Partition@3.9.0-rc3 L1972-1980): the ISR and partition epoch commit,
    then the HW rule runs (the maximal ISR is the committed one again)."""
    revert_isr_change(p)
    commit_isr(p, isr, partition_epoch)
    maybe_increment_leader_hw(p, now, config, brokers)


# Partition.handleAlterPartitionError (Partition@3.9.0-rc3 L1892-1944): the controller says the request was not
# applied: back to the last committed state, a new proposal may follow at once.
REVERTING_ERRORS = frozenset(("OPERATION_NOT_ATTEMPTED", "INELIGIBLE_REPLICA"))
# ... or the leader's state may be out of date: it stays pending, no retry, until new metadata (L1911-1935).
STUCK_ERRORS = frozenset(
    (
        "UNKNOWN_TOPIC_OR_PARTITION",
        "UNKNOWN_TOPIC_ID",
        "FENCED_LEADER_EPOCH",
        "INVALID_UPDATE_VERSION",
        "INVALID_REQUEST",
        "NEW_LEADER_ELECTED",
    )
)


# The errors the controller answers for a whole AlterPartition request, never for one partition: the broker's epoch
# is not the registration's (ReplicationControlManager@4.4 L1083 `clusterControl.checkBrokerEpoch`, which throws
# StaleBrokerEpochException: ClusterControlManager@4.4 L800-804), or the broker may not alter partitions. Only an
# answer that does not say whether its error is top-level (`top_level_error`) is told by these names.
TOP_LEVEL_ERRORS = frozenset(("STALE_BROKER_EPOCH", "CLUSTER_AUTHORIZATION_FAILED"))


def top_level_error(ev: AlterPartitionResponse) -> bool:
    """Whether the answer's error is the whole request's. Kafka 3.9 treats every top-level error alike, whatever its
    name: handleAlterPartitionResponse takes items out only when the top-level code is NONE (AlterPartitionManager
    @3.9.0-rc3 L375-379: any other code is logged and returned) and the caller schedules the resend 50 ms later
    (L224-231); the partitions' callbacks never run. The agent reports such an error for every partition of the
    request with `top_level` true (the response's top-level error code); an answer without the field (an older
    agent) is told by its error's name (`TOP_LEVEL_ERRORS`)."""
    if ev.top_level is not None:
        return ev.top_level and ev.error is not None
    return ev.error in TOP_LEVEL_ERRORS


def handle_alter_partition_response(
    p: Partition | None, ev: AlterPartitionResponse, config: Config, out: Outputs, brokers: Metadata = NO_METADATA
) -> None:
    """Partition.submitAlterPartition's callback (Partition@3.9.0-rc3 L1852-1879) for the controller's answer.

    The broker's manager takes every answer (its request is done when all its partitions are answered). A proposal
    submitted again after a retriable error reaches the manager first: Kafka resubmits inside the callback, before
    the manager sends its next request (AlterPartitionManager@3.9.0-rc3 L364-368, 224-227). A top-level error
    (`top_level_error`) reaches the manager only: it keeps the items and sends them again after its backoff.
    """
    at = Order.of_event(ev)
    top_level = top_level_error(ev)
    if p is not None and not top_level and p.sent_item is not None and p.sent_item[0] == ev.broker:
        p.sent_item = None  # the manager took the item out (L266-274): a later request's is a new proposal
    if _take_response(p, ev, top_level, config, out, brokers):
        assert p is not None
        submit_alter_partition(p, at, out)
    isr = None if ev.isr is None else tuple(sorted(set(ev.isr)))
    out.alter_partition.append(
        AlterPartitionAnswer(
            *at, ev.cluster, ev.broker, ev.topic, ev.partition, ev.error, isr, ev.partition_epoch, top_level
        )
    )


def _take_response(
    p: Partition | None, ev: AlterPartitionResponse, top_level: bool, config: Config, out: Outputs, brokers: Metadata
) -> bool:
    """The partition takes an answer only for the proposal in flight: a response for a state that has moved on (new
    metadata came first, L1857) is ignored, as is one no proposal of this leader awaits. Success commits
    (`commit_isr_change`) unless its leader epoch is not the partition's or its partition epoch is older (L1958-1965:
    it stays pending); OPERATION_NOT_ATTEMPTED and INELIGIBLE_REPLICA revert; the errors after which the leader waits
    for metadata leave it pending (stuck); any other error is retried (L1940-1941). Returns whether to retry."""
    if p is None or p.leader_epoch < 0:
        out.count(IGNORED_ALTER_PARTITION_RESPONSES, "no_leader_and_isr")
        return False
    if ev.broker not in p.held_by:
        out.count(IGNORED_ALTER_PARTITION_RESPONSES, "no_proposal")
        return False
    if top_level:
        out.count(IGNORED_ALTER_PARTITION_RESPONSES, "top_level_error")  # the manager's: it sends the item again
        return False
    p.held_by = tuple(b for b in p.held_by if b != ev.broker)  # the manager took the item out (L266-274)
    if ev.broker != p.leader:
        out.count(IGNORED_ALTER_PARTITION_RESPONSES, "no_proposal")  # a former leader's: its partition moved on
        return False
    out.touched.add(p.key)
    if p.isr_state is IsrState.COMMITTED:
        out.count(IGNORED_ALTER_PARTITION_RESPONSES, "stale")
        return False
    if ev.error is None:
        assert ev.isr is not None and ev.partition_epoch is not None
        if ev.leader_epoch != p.leader_epoch or ev.partition_epoch < p.partition_epoch:
            out.count(FAILED_ISR_UPDATES, "stale_epoch")
            return False
        if applies_answer(p):
            p.answered = True
            return False
        commit_isr_change(p, tuple(sorted(set(ev.isr))), ev.partition_epoch, ev.ts, config, brokers)
        return False
    out.count(FAILED_ISR_UPDATES, ev.error)
    if ev.error in REVERTING_ERRORS:
        revert_isr_change(p)
        return False
    return ev.error not in STUCK_ERRORS


def applies_answer(p: Partition) -> bool:
    """Whether the leader reports when its Partition applies a committed answer, so the model commits then, not when
    the manager receives it. The manager completes the item's future in handleAlterPartitionResponse
    (DefaultAlterPartitionManager@4.4 L262-275); the Partition's callback then takes the partition's write lock and
    applies it (handleAlterPartitionUpdate, Partition@3.9.0-rc3 L1852-1879, L1953-1981; 4.4 alike), a few to tens of
    ms later on the real brokers, and in KRaft the metadata path often applies the same commit first (makeLeader ->
    updateAssignmentAndIsr, L980-1005; then the answer is ignored, L1857). A fetch in between finds the change still
    in flight (`isInflight`, L1023) and expands nothing. The agent reports both: the response path's `isr_updated`
    (`commit_isr_write`) and the metadata's `leader_and_isr` (`make_leader`); so for a partition whose leader reports
    (`audited`), the model commits at the first of them. Without the agent, at the answer."""
    return p.audited


def reported_ahead(p: Partition, ev: IsrUpdated) -> bool:
    """ZooKeeper mode: the leader reported a write from the model's committed ISR at the next partition epoch while
    the model holds none in flight: two request threads raced (a follower judged in sync against an HW another
    fetch had not raised yet, `maybeExpandIsr`), and the fetch the model decides on is stamped after the
    write (docs/evidence/zk-expand-before-fetch). The report waits for the model's matching write."""
    return (
        p.isr_state is IsrState.COMMITTED
        and ev.partition_epoch == p.partition_epoch + 1
        and ev.isr_before is not None
        and tuple(sorted(set(ev.isr_before))) == p.isr
    )


def commit_reported_ahead(p: Partition, now: int, config: Config, brokers: Metadata) -> None:
    """The model's write in flight commits at once when the leader reported it already (`reported_ahead`)."""
    if p.reported_ahead == (p.partition_epoch + 1, p.proposed_isr):
        p.reported_ahead = None
        commit_isr_change(p, p.proposed_isr, p.partition_epoch + 1, now, config, brokers)


def commit_isr_write(p: Partition | None, ev: IsrUpdated, config: Config, brokers: Metadata = NO_METADATA) -> None:
    """The write in flight commits when the leader reports it (`isr_updated`). ZooKeeper mode (3.1+, with the agent,
    SPEC §4.9): stamped after the ZooKeeper write (ZkAlterPartitionManager@3.9.0-rc3 L62-90), with a newer partition
    epoch; the model's own write commits then, as Kafka's handleAlterPartitionUpdate would (L1953-1981), and where the
    broker wrote something else, the audit shows it. AlterPartition: the Partition applied the controller's answer
    the model holds (`applies_answer`), the ISR and partition epoch the controller committed."""
    if p is None or ev.broker != p.leader:
        return
    p.writes_reported = True
    if not config.alter_partition and reported_ahead(p, ev):
        p.reported_ahead = (ev.partition_epoch, tuple(sorted(set(ev.isr))))
        return
    if p.isr_state is IsrState.COMMITTED or ev.partition_epoch <= p.partition_epoch:
        return
    if not config.alter_partition:
        commit_isr_change(p, p.proposed_isr, p.partition_epoch + 1, ev.ts, config, brokers)
    elif p.answered:
        commit_isr_change(p, tuple(sorted(set(ev.isr))), ev.partition_epoch, ev.ts, config, brokers)


def become_leader_or_follower(
    p: Partition, ev: LeaderAndIsr, config: Config, out: Outputs, brokers: Metadata = NO_METADATA
) -> None:
    """ReplicaManager.becomeLeaderOrFollower: the epoch guards, then `make_leader` for an accepted state.

    A state reported by a broker (the agent) counts once: a live partition's from its new leader (another
    replica's copy is `follower_copy`), an offline one's from the first replica that reports it (the others,
    the same state again, are `duplicate`). Neither is a decision: one request must not become many.
    """
    if ev.broker is not None:
        if follower_copy(ev):
            out.count(IGNORED_LEADER_AND_ISR, "follower_copy")
            return
        if _same_state(p, ev) and not drops_pending(p, config) and not fresh_partition(p, ev):
            out.count(IGNORED_LEADER_AND_ISR, "duplicate")
            return
    if ev.controller_epoch < p.controller_epoch:
        out.decide(p, ev.ts, DecisionKind.REJECTED, p.isr, [], error="STALE_CONTROLLER_EPOCH")
        return
    p.controller_epoch = ev.controller_epoch
    if ev.leader_epoch < p.leader_epoch or (ev.leader_epoch == p.leader_epoch and not metadata_change(p, ev, config)):
        out.decide(p, ev.ts, DecisionKind.REJECTED, p.isr, [], error="STALE_CONTROLLER_EPOCH")
        return
    if ev.leader >= 0 and ev.leader not in ev.replicas:
        out.decide(p, ev.ts, DecisionKind.REJECTED, p.isr, [], error="UNKNOWN_TOPIC_OR_PARTITION")
        return
    if ev.partition_epoch < p.partition_epoch and config.alter_partition:
        # Partition.makeLeader skips a state older than the partition epoch it has (Partition@3.9.0-rc3 L724-728):
        # an AlterPartition response may bring the epoch before the metadata does.
        out.count(IGNORED_LEADER_AND_ISR, "stale_partition_epoch")
        return
    make_leader(p, ev, config, out, brokers)


def follower_copy(ev: LeaderAndIsr) -> bool:
    """A live partition's state as a replica other than its leader reported it: the leader's report counts, this one
    only counts as `follower_copy`, wherever it is applied (it reads nothing of the partition)."""
    return ev.broker is not None and ev.leader >= 0 and ev.broker != ev.leader


def drops_pending(p: Partition, config: Config) -> bool:
    """KRaft: the leader applies a registration of its partition epoch again, though the AlterPartition answer
    already committed it: Partition.makeLeader skips only an older epoch (Partition@3.9.0-rc3 L724-728; 4.4.0 alike)
    and updateAssignmentAndIsr commits the state, dropping a change proposed since (L1004). The manager still holds
    that proposal, so the leader's next one is refused (OPERATION_NOT_ATTEMPTED) and its answer is stale: seen on the
    KRaft 4.4.0 lab, a resumed leader's shrink committed by its answer, then its expand dropped by the shrink's
    metadata."""
    return config.alter_partition and p.isr_state is not IsrState.COMMITTED


def restarted(seq: int | None, last_ts: int | None) -> bool:
    """Whether an event with this `seq` comes from a new run of a broker whose events so far reached `last_ts`: the
    agent's `seq` starts at its start time in ms x 1000 and only increases (agent/README.md, "Event contract"), so a
    run that started after the last event seen is a new one (the same run would need a million events a second)."""
    return seq is not None and last_ts is not None and seq // 1000 > last_ts


def forget_partition(p: Partition, broker: int) -> None:
    """`broker` restarted: its Partitions, its AlterPartition manager and their pending changes lived in memory
    (ReplicaManager's allPartitions, DefaultAlterPartitionManager's unsentIsrUpdates), and the new run has none of
    them until it applies its metadata and makeLeader creates them again (`fresh_partition`). Until then its
    isr-expiration runs skip what it led (the KRaft 4.4.0 lab's controller failover: the restarted node's first run
    came 25 ms before its metadata replay, and found nothing to shrink)."""
    if p.leader == broker:
        p.hosted = False
        revert_isr_change(p)
    p.held_by = tuple(b for b in p.held_by if b != broker)
    if p.sent_item is not None and p.sent_item[0] == broker:
        p.sent_item = None


def removed_by_controller(
    p: Partition,
    leader: int | None,
    leader_epoch: int,
    isr: tuple[int, ...],
    isr_state: IsrState,
    proposed_isr: tuple[int, ...],
    partition_epoch: int,
) -> list[int]:
    """The followers a KRaft metadata change of `p` (same leader and leader epoch, a newer partition epoch, now
    applied) removed from the ISR that its leader had not proposed to remove: the controller's own removals, of a
    broker it fenced or that is shutting down or unregistered (ReplicationControlManager@4.3.1 L1399-1475,
    handleBrokerFenced / handleBrokerInControlledShutdown). The controller writes the registration change in the same
    metadata batch, and the leader's metadata cache has it before the partition change is applied
    (BrokerMetadataPublisher@4.4 L130 `metadataCache.setImage`, then L148 `applyDelta`), while the agent reports the
    registration when onMetadataUpdate returns, after the partitions' `leader_and_isr`: on the KRaft lab's failover
    a fetch in between re-added a fenced broker in the model only. So such a follower is not eligible to join
    (`is_replica_isr_eligible`) in the leader's metadata until the leader reports its registration again. The
    arguments are `p`'s leader, leader epoch, ISR, ISR state, proposed ISR and partition epoch before the change."""
    if (
        p.leader != leader
        or p.leader_epoch != leader_epoch
        or p.partition_epoch <= partition_epoch
        or not p.alter_partition
        or (isr_state is IsrState.PENDING_SHRINK and proposed_isr == p.isr)
    ):
        return []
    return sorted(set(isr) - set(p.isr))


def fresh_partition(p: Partition, ev: LeaderAndIsr) -> bool:
    """The leader reports Kafka's isNewLeader (`new_leader`) for a partition the model already has it lead: the
    broker's Partition is new, as after a restart, when the broker replays its metadata. Its makeLeader finds
    `isNewLeader = !isLeader` and `isNewLeaderEpoch` against a new Partition's leader epoch -1 (Partition@4.4
    L606-607; 3.9 alike) and resets the followers as a new leader's (resetReplicaState, L652-658): their LEO unknown,
    caught up as of now if in the ISR. Seen on the KRaft 4.4.0 lab's controller failover: the restarted node, its
    followers now fetching elsewhere, shrank its ISR one lag later; the model, which had kept their records at the
    leader's LEO, never did."""
    return bool(ev.new_leader) and ev.leader == p.leader


def metadata_change(p: Partition, ev: LeaderAndIsr, config: Config) -> bool:
    """A KRaft metadata change of the partition with the same leader epoch (an ISR the controller changed: a broker
    fenced or shutting down removed, an AlterPartition committed): ReplicaManager takes an equal leader epoch from a
    KRaft controller only (ReplicaManager@3.9.0-rc3 L1986); isrwatch takes it for a leader that proposes with
    AlterPartition and stays its leader."""
    return config.alter_partition and ev.leader == p.leader


def _same_state(p: Partition, ev: LeaderAndIsr) -> bool:
    return (p.leader, p.leader_epoch, p.partition_epoch, p.controller_epoch, p.replicas, p.isr) == (
        ev.leader,
        ev.leader_epoch,
        ev.partition_epoch,
        ev.controller_epoch,
        tuple(ev.replicas),
        tuple(sorted(set(ev.isr))),
    )


def make_leader(p: Partition, ev: LeaderAndIsr, config: Config, out: Outputs, brokers: Metadata = NO_METADATA) -> None:
    """Partition.makeLeader: take the controller's state verbatim and reset the follower records.

    The state is committed (updateAssignmentAndIsr, Partition@3.9.0-rc3 L980-1005): a pending change is dropped.
    Only a new leader epoch resets the followers and the epoch's start offset (L771-806): a KRaft metadata change
    with the same epoch (`metadata_change`) keeps them."""
    isr_before = p.isr
    fresh = fresh_partition(p, ev)
    new_leader = ev.leader != p.leader or fresh
    new_epoch = ev.leader_epoch > p.leader_epoch or fresh
    leader_leo = p.leader_leo if ev.leader_leo is None else ev.leader_leo
    isr = tuple(sorted(set(ev.isr)))
    p.leader = ev.leader
    p.leader_epoch = ev.leader_epoch
    commit_isr(p, isr, ev.partition_epoch)
    p.replicas = tuple(ev.replicas)
    revert_isr_change(p)
    p.elr = None if ev.elr is None else tuple(sorted(set(ev.elr)))
    p.last_known_elr = None if ev.last_known_elr is None else tuple(sorted(set(ev.last_known_elr)))
    p.leader_recovery_state = ev.leader_recovery_state
    p.alter_partition = config.alter_partition
    p.leader_leo = leader_leo
    p.hosted = True
    if not new_epoch:
        p.followers = [p.follower(r) or Follower(r) for r in sorted(ev.replicas) if r != ev.leader]
        _took_state(p, ev, config, out, isr_before, brokers)
        return
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
    _took_state(p, ev, config, out, isr_before, brokers)


def _took_state(
    p: Partition, ev: LeaderAndIsr, config: Config, out: Outputs, isr_before: tuple[int, ...], brokers: Metadata
) -> None:
    """The end of makeLeader: the leader's HW and min.insync.replicas, the HW rule (L814), one decision."""
    if ev.hw is not None:
        p.hw = ev.hw
    if ev.min_insync_replicas is not None:
        p.min_isr = ev.min_insync_replicas
    p.audited = ev.broker is not None
    maybe_increment_leader_hw(p, ev.ts, config, brokers)
    changed = sorted(set(isr_before).symmetric_difference(p.isr))
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


def update_follower_fetch_state(
    p: Partition | None, ev: Fetch, config: Config, out: Outputs, brokers: Metadata = NO_METADATA
) -> None:
    """Partition.updateFollowerFetchState: Replica.updateFetchState, then maybeExpandIsr, then the HW.

    A fetch Kafka would have refused changes nothing and is counted by reason: no leader yet or offline,
    not from a follower (ReplicaManager L1567-1572), a stale leader epoch (KAFKA-8400), an offset past
    the leader's LEO (OFFSET_OUT_OF_RANGE), or (KRaft) a stale broker epoch (`stale_broker_epoch`).
    """
    inactive = _inactive(p, ev)
    if inactive:
        out.count(IGNORED_FETCHES, inactive)
        return
    assert p is not None
    f = p.follower(ev.replica)
    if f is None:
        out.count(IGNORED_FETCHES, "not_follower")
        return
    if ev.current_leader_epoch is not None and ev.current_leader_epoch != p.leader_epoch:
        out.count(IGNORED_FETCHES, "leader_epoch_mismatch")
        return
    offset = ev.fetch_offset
    leader_leo = ev.leader_leo
    if offset > leader_leo:
        out.count(IGNORED_FETCHES, "offset_out_of_range")
        return
    if stale_broker_epoch(ev, brokers):
        out.count(IGNORED_FETCHES, "stale_broker_epoch")
        return
    t = ev.clock  # Kafka's fetchTimeMs; the fetch took effect at `ev.ts`, where the model orders it and decides
    if leader_leo > p.leader_leo:
        p.leader_leo = leader_leo
        if p.audited:
            # Records a broker took without an `append` (the agent reports appends only at isr-expiration runs):
            # Kafka's appendRecordsToLeader ran the HW rule when it took them, before this fetch read them
            # (Partition.scala 3.9 L1365-1383), with the followers as they were: the HW may move first (SPEC §4.7).
            maybe_increment_leader_hw(p, t, config, brokers)
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
    if ev.broker_epoch is not None:
        f.broker_epoch = ev.broker_epoch
    expanded = maybe_expand_isr(p, f, ev, config, out, brokers)
    if leo_changed:
        maybe_increment_leader_hw(p, t, config, brokers)
    if expanded is not None:
        out.decide(p, ev.ts, DecisionKind.EXPAND, expanded, [f.replica])


def stale_broker_epoch(ev: Fetch, brokers: Metadata) -> bool:
    """Replica.updateFetchStateOrThrow (Replica.scala@3.9.0-rc3 L116-123) throws NotLeaderOrFollowerException, before
    it changes anything, when the fetch's broker epoch is not -1 and the leader's metadata has the follower alive
    with a greater one (getAliveBrokerEpoch: an unfenced registration's epoch, KRaftMetadataCache.scala@3.9.0-rc3
    L471-474): a fetch of the follower's previous incarnation (PartitionTest@3.9.0-rc3
    testFenceFollowerFetchWithStaleBrokerEpoch). Without KRaft metadata (ZooKeeper mode) there is no such check."""
    epoch = ev.broker_epoch
    if epoch is None or epoch == -1:
        return False
    registration = brokers.get(ev.replica)
    return registration is not None and not registration.fenced and registration.epoch > epoch


def caught_up_repeat(p: Partition | None, ev: Fetch) -> bool:
    """Whether a fetch that arrives behind the stream's frontier is a caught-up repeat, which the stream still applies
    (SPEC §6): its leader's follower, in the (maximal) ISR, already at the leader's LEO, fetching at that LEO under the
    current leader epoch, after every fetch and reset of it the model applied. Applying it changes only the follower's
    lastCaughtUpTimeMs and lastFetchTimeMs (Replica.updateFetchState, SPEC §4.2: no expand, no HW
    move), and nothing reads those before the follower's next fetch or its leader's next isr-expiration tick. The
    agent holds such repeats (coalescing, agent/README.md) and emits each before its partition's next event and its
    broker's next isr-expiration tick, and its watermark does not wait for them: so nothing the repeat changes was read
    in between, and applying it on arrival gives what a replay gave by applying it at its time."""
    if p is None or ev.broker is None or p.leader != ev.broker:
        return False
    f = p.follower(ev.replica)
    return (
        f is not None
        and ev.replica in maximal_isr(p)
        and ev.current_leader_epoch in (None, p.leader_epoch)
        and ev.fetch_offset == ev.leader_leo == p.leader_leo == f.leo == f.last_fetch_leader_leo
        and max(f.last_fetch_ms, f.last_caught_up_ms) <= ev.clock
    )


def maybe_expand_isr(
    p: Partition, f: Follower, ev: Fetch, config: Config, out: Outputs, brokers: Metadata = NO_METADATA
) -> tuple[int, ...] | None:
    """Partition.maybeExpandIsr: a follower outside the ISR rejoins once it reached the HW and the current
    leader epoch's start offset (no lag-time condition), unless an ISR change is in flight or (KRaft) it is not
    eligible (Partition@3.9.0-rc3 L1022-1058). Returns the ISR before the write or proposal, None if none."""
    isr = p.isr
    start = p.leader_epoch_start_offset
    if f.replica in isr or f.leo < p.hw or start is None or f.leo < start:
        return None
    if p.isr_state is not IsrState.COMMITTED or (brokers and not is_replica_isr_eligible(f, brokers)):
        return None
    new_isr = tuple(sorted([*isr, f.replica]))
    if writes_in_flight(p, config):
        if not prepare_isr_change(p, IsrState.PENDING_EXPAND, new_isr, ev.ts, Order.of_event(ev), config, out):
            return None
        if not config.alter_partition:
            commit_reported_ahead(p, ev.ts, config, brokers)
        return isr
    update_isr(p, new_isr, ev.ts, Order.of_event(ev), out)
    if config.rules.hw_after_isr_update:  # 3.1: handleAlterPartitionUpdate (Partition@3.9.0-rc3 L1980)
        maybe_increment_leader_hw(p, ev.ts, config, brokers)
    return isr


def append_to_leader(
    p: Partition | None, ev: Append, config: Config, out: Outputs, brokers: Metadata = NO_METADATA
) -> None:
    """Partition.appendRecordsToLeader: the leader's LEO only grows; a new LEO may let the HW move."""
    inactive = _inactive(p, ev)
    if inactive:
        out.count(IGNORED_APPENDS, inactive)
        return
    assert p is not None
    if ev.leader_leo > p.leader_leo:
        p.leader_leo = ev.leader_leo
    maybe_increment_leader_hw(p, ev.ts, config, brokers)
    if ev.check_ms is not None and p.audited:
        # The agent's append is the LEO this partition's check read, at `check_ms`, during the run that started at
        # `ts`: the check is here, after the fetches applied before it and before those applied after it.
        maybe_shrink_isr(p, ev.check_ms, config, out, Order.of_event(ev), brokers=brokers)
        p.checked_in_run = ev.ts


def maybe_shrink_isr(
    p: Partition,
    now: int,
    config: Config,
    out: Outputs,
    at: Order,
    run_end_ms: int | None = None,
    brokers: Metadata = NO_METADATA,
) -> int:
    """Partition.maybeShrinkIsr at `now`; returns when the next remaining ISR follower becomes eligible.
    `run_end_ms`: the end of the broker's run that checks it (the agent), for the audit.

    Each removed follower gets the reason Kafka's getOutOfSyncReplicas comment names: stuck (no fetch
    for more than the lag) or slow (fetching, but not caught up within it). A partition with a change in flight is
    skipped (`shrink_eligible_at`); a write that stays in flight is a proposal, which moves no HW until it commits
    (the maximal ISR of a pending shrink is the committed one, Partition@3.9.0-rc3 L244).
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
        new_isr = tuple(r for r in isr_before if str(r) not in expired)
        if not writes_in_flight(p, config):
            update_isr(p, new_isr, now, at, out)
            maybe_increment_leader_hw(p, now, config, brokers)
        elif not prepare_isr_change(p, IsrState.PENDING_SHRINK, new_isr, now, at, config, out):
            return next_eligible
        changed = sorted(int(r) for r in expired)
        out.decide(p, now, DecisionKind.SHRINK, isr_before, changed, reasons=expired, run_end_ms=run_end_ms)
    return next_eligible


def tick_checks(p: Partition, run_ms: int, run_end_ms: int | None) -> bool:
    """Whether its leader's isr-expiration run, from `run_ms` to `run_end_ms`, checks `p` at the run's tick. Not when
    the run reported its check of `p` (an append: it checked there), nor, once its leader reported one, in a run that
    reports its end: that agent reports, where it happens, every check that reads a new LEO and every check that
    shrinks (its hook on Partition.prepareIsrShrink, which only the write-locked recheck that found a follower out of
    sync calls, Partition@3.9.0-rc3 L1243-1271). A check it did not report read a LEO the partition's events had
    reported and shrank nothing, at a place among the run's fetches the model cannot tell: the first check holds the
    read lock, as a fetch's state update does (L926-933), which the agent reports only after it."""
    return p.checked_in_run is None or (run_end_ms is None and p.checked_in_run != run_ms)


def next_shrink_eligible_at(p: Partition, lag: int) -> int:
    """The earliest time an isr-expiration check could remove any follower of `p` (INF: none can be)."""
    return min((shrink_eligible_at(p, f, lag) for f in p.followers), default=INF)


# The fields a record copies as they are from the state it shows (SPEC §5 names them after §1's).
_FOLLOWER_AS_IS = ("replica", "leo", "log_start_offset", "last_caught_up_ms", "last_fetch_leader_leo", "last_fetch_ms")
_PARTITION_AS_IS = (
    "cluster", "topic", "partition", "leader", "leader_epoch", "controller_epoch", "partition_epoch", "hw",
    "leader_leo", "leader_epoch_start_offset",
)  # fmt: skip


def _as_is(state: Partition | Follower, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(state, name) for name in names}


def health(p: Partition, config: Config) -> Health:
    """The partition's health by Kafka's broker metrics: offline without a leader (OfflinePartitionsCount), under min
    ISR (Partition.isUnderMinIsr: producers with acks=all get NOT_ENOUGH_REPLICAS, Partition@3.9.0-rc3 L1377-1383),
    under-replicated (Partition.isUnderReplicated: the ISR smaller than the replicas, L364)."""
    if p.leader == -1:
        return Health.OFFLINE
    if p.leader is None or not p.replicas:
        return Health.OK  # no state yet
    if len(p.isr) < min_isr(p, config):
        return Health.UNDER_MIN_ISR
    return Health.UNDER_REPLICATED if len(p.isr) < len(p.replicas) else Health.OK


def partition_health(p: Partition, ts: int, config: Config, leader_before: int | None = None) -> PartitionHealth:
    """What the incident book takes of `p` at `ts`: its health and the committed state it follows from."""
    return PartitionHealth(
        ts,
        p.cluster,
        p.topic,
        p.partition,
        health(p, config),
        p.leader,
        leader_before,
        p.isr,
        p.replicas,
        p.controller_epoch,
    )


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
                **_as_is(f, _FOLLOWER_AS_IS),
                in_sync=f.replica in isr,
                lag_offsets=p.leader_leo - f.leo if f.leo >= 0 else None,
                shrink_eligible_at_ms=eligible,
                predicted_shrink_at_ms=None if scheduled >= INF else scheduled,
            )
        )
    floor = min_isr(p, config)
    # The ISR-change state shows for AlterPartition leaders and writes in flight: ZooKeeper records keep their keys.
    shows_state = p.alter_partition or p.isr_state is not IsrState.COMMITTED
    return PartitionRecord(
        **_as_is(p, _PARTITION_AS_IS),
        replicas=list(p.replicas),
        isr=list(isr),
        offline=p.leader == -1,
        under_replicated=len(isr) < len(p.replicas),
        under_min_isr=len(isr) < floor,
        at_min_isr=len(isr) == floor,  # Partition.isAtMinIsr
        followers=followers,
        isr_state=p.isr_state if shows_state else None,
        maximal_isr=list(maximal_isr(p)) if shows_state else None,
        pending_since_ms=p.pending_since_ms,
        elr=None if p.elr is None else list(p.elr),
        last_known_elr=None if p.last_known_elr is None else list(p.last_known_elr),
    )
