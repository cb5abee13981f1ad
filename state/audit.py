"""The live audit (SPEC §7): the model's ISR writes and batches paired with what each broker observably did.

A pair that disagrees, or a side left alone once its cluster's time has passed it by `audit_window_ms`, is a
`Divergence`. Whether one is `timing` is decided in one place, `excuse`, by the ordered rules of `RULES` (SPEC §7
numbers them by these names); each rule's docstring carries its reason and Kafka citation. Like the engine and
the book, the audit advances "up to W" per cluster and serialises, so any cut of the input gives the same
divergences.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

import msgspec
from msgspec import Struct

from .config import Config
from .events import AlterPartitionSent, BrokerObserved, IsrChangePropagated, IsrUpdated
from .records import (
    Cause,
    DecisionKind,
    Divergence,
    DivergenceKind,
    IsrWrite,
    Observation,
    Propagation,
    ProposedIsr,
    ReplicaView,
)

# 4: sides keyed by proposal (`Key`); 5: the brokers' AlterPartition requests (`BrokerAudit.sends`) and proposals
# (`PartitionAudit.proposed`)
STATE_VERSION = 5

# How long a model proposal waits for its broker's next AlterPartition request before it is judged alone
# (`settles_at`). Kafka bounds no such wait: a submit joins the queue while a request is in flight, and the manager
# retries that request until the controller answers (DefaultAlterPartitionManager@4.4 L104-142; its channel's
# retryTimeoutMs is Long.MAX_VALUE). Twice the longest the KRaft lab held a queue: 16 s, in a controller failover.
SEND_HELD_MS = 30_000

Epoch = tuple[int, int]  # (leader, partition epoch): an ISR write of a partition (the zkVersion it creates)
# (leader, partition epoch, proposal): one side's write or proposal of a partition. A leader may propose several
# times from one epoch (a proposal refused or reverted, then another: SPEC §4.9 rules 4 and 6), so the third member
# numbers one side's proposals of an epoch in their order (`_waits`), and each pairs with one of the other side's.
Key = tuple[int, int, int]
PartitionKey = tuple[str, str, int]  # (cluster, topic, partition)
BrokerKey = tuple[str, int]  # (cluster, broker)
SortedKey = TypeVar("SortedKey", bound=tuple[Any, ...])  # a key that orders ties
A = TypeVar("A", bound="IsrWrite | Observation")
B = TypeVar("B", bound="IsrWrite | Observation")


class Span(Struct, array_like=True, frozen=True):
    """A recent ISR change of the partition by `leader`, from the earlier side's time of it to the later's."""

    leader: int
    lo: int
    hi: int


class Send(Struct, array_like=True, frozen=True):
    """A batch that carried the partition: its broker, its time and whose it was (the broker's or the model's)."""

    broker: int
    ts: int
    by_broker: bool


class Proposed(Struct, array_like=True, frozen=True):
    """A leader's AlterPartition proposal of the partition as its request carried it: see `reproposed`."""

    leader: int
    partition_epoch: int  # the epoch its commit would create
    isr: tuple[int, ...]  # what it proposed: no rule compares it (a repeat may add another follower)
    ts: int


class PartitionAudit(Struct, kw_only=True):
    """All the audit keeps of one partition: the sides waiting for a partner, and the times its rules look back on."""

    writes: dict[Key, IsrWrite] = {}  # the model's, not yet judged
    observed: dict[Key, Observation] = {}  # the brokers', not yet judged
    commits: dict[Epoch, int] = {}  # when each broker write committed (its `ts`): see `in_flight`
    spans: list[Span] = []  # see `shifted`
    sent: list[Send] = []  # see `displaced`
    splits: list[int] = []  # when a timing divergence split the two sides' views of the ISR: see `split`
    joins: list[int] = []  # when they joined again: a LeaderAndIsr, or a pair of writes that agreed
    proposed: list[Proposed] = []  # the brokers' recent proposals: see `reproposed`

    def split_since(self, ts: int) -> int | None:
        """When the views were split as of `ts`: the last split at or before it, if no join followed it by `ts`."""
        start = max((s for s in self.splits if s <= ts), default=None)
        if start is None or any(start < j <= ts for j in self.joins):
            return None
        return start

    def prune(self, horizon: int) -> None:
        """Forget the times before `horizon`, which no side still to judge looks back on; a split still open there
        stays, as one time."""
        open_split = max((s for s in self.splits if s < horizon), default=None)
        if open_split is not None and any(open_split < j < horizon for j in self.joins):
            open_split = None
        self.splits = [s for s in self.splits if s >= horizon] + ([] if open_split is None else [open_split])
        self.joins = [j for j in self.joins if j >= horizon]
        self.commits = {epoch: ts for epoch, ts in self.commits.items() if ts >= horizon}
        self.spans = [s for s in self.spans if s.hi >= horizon]
        self.sent = [s for s in self.sent if s.ts >= horizon]
        self.proposed = [q for q in self.proposed if q.ts >= horizon]

    def is_empty(self) -> bool:
        return not (
            self.writes
            or self.observed
            or self.commits
            or self.spans
            or self.sent
            or self.splits
            or self.joins
            or self.proposed
        )


class BrokerAudit(Struct, kw_only=True):
    """A broker that reports (its writes are audited): its batches and the model's, not yet judged, by time."""

    batches: dict[int, Propagation] = {}
    propagated: dict[int, IsrChangePropagated] = {}
    sends: list[int] = []  # when it sent each AlterPartition request (`alter_partition_sent`), in order
    reports_sends: bool = False  # it reported one: its proposals go with its requests (`settles_at`)

    def first_send(self, since: int) -> int | None:
        """Its first AlterPartition request at or after `since`, of those reported (None: none yet)."""
        i = bisect_left(self.sends, since)
        return self.sends[i] if i < len(self.sends) else None


class Marks(Struct, array_like=True, frozen=True):
    """What a batch's verdict looks back on of one partition (`shifted`, `split`), as a state key's pairing of its ISR
    writes left it: the key sends it to the driver, which judges the batches (`Audit.take`)."""

    cluster: str
    topic: str
    partition: int
    spans: list[Span]
    splits: list[int]
    joins: list[int]


class _AuditState(Struct, array_like=True):
    version: int
    partitions: dict[PartitionKey, PartitionAudit] = {}
    brokers: dict[BrokerKey, BrokerAudit] = {}


class _Version(Struct, array_like=True):
    version: int  # every version's blob starts with it


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(_AuditState)


def _decode(blob: bytes) -> _AuditState:
    version = msgspec.msgpack.decode(blob, type=_Version).version
    if version != STATE_VERSION:
        raise ValueError(
            f"audit state version {version} is not {STATE_VERSION}: this checkpoint was written by another "
            "isrwatch; start the new version with a new --checkpoint (and a new store)"
        )
    return _decoder.decode(blob)


class Case(NamedTuple):
    """What the rules judge: an ISR write's pair or lone side, or a partition one side's batch carried and the
    other's did not."""

    ts: int  # the earlier side's time; a batch's time
    broker: int  # the write's leader; the batch's broker
    write: IsrWrite | None = None
    observed: Observation | None = None
    margin_ms: int | None = None  # a shrink: how far past (+) or short of (-) the lag limit its deciding follower was
    carried_by_broker: bool | None = None  # a batch: whether the broker's batch carried the partition (else model's)


class Excuse(NamedTuple):
    """A rule's verdict that a divergence is `timing`: which rule, and its margin (see the rule), within its bound."""

    cause: Cause
    margin_ms: int


def _agrees(w: IsrWrite, o: Observation | None) -> bool:
    return o is not None and _side(w)[:2] == _side(o)[:2]


def _since_commit(p: PartitionAudit, w: IsrWrite) -> int | None:
    """How long after the broker's previous write of the partition committed the model made `w` (negative: before)."""
    committed = p.commits.get((w.broker, w.partition_epoch - 1))
    return None if committed is None else w.ts - committed


# The timing rules, in the order `excuse` asks them (SPEC §7 numbers them so). Each check gives the margin of a case
# its reason applies to (None: it does not); its rule's `Bound` beside it in `RULES` says how far that reason reaches.


class Bound(NamedTuple):
    """The margins (ms, both ends included) within which a rule may call a divergence timing: no rule is unbounded."""

    lo: int
    hi: int

    def holds(self, margin: int) -> bool:
        return self.lo <= margin <= self.hi


def in_flight(audit: Audit, p: PartitionAudit, case: Case, bound: Bound) -> int | None:
    """Kafka starts no ISR change of a partition while its previous ZooKeeper write is in flight (Partition.scala 3.9
    `partitionState.isInflight`: L1023 and L1046-1048 for expands, L1245 for shrinks); the model takes a write as
    done when it decides it. So a model write decided before the broker's previous write of the partition committed
    may differ from the broker's, or have no partner. Margin: how long before the commit (-)."""
    w = case.write
    if w is None or _agrees(w, case.observed):
        return None
    return _since_commit(p, w)


def both_expand(audit: Audit, p: PartitionAudit, case: Case, bound: Bound) -> int | None:
    """Kafka 3.1+ runs the HW rule when a write commits (handleAlterPartitionUpdate, Partition.scala 3.9
    L1953-1981), the model when it decides: two expands that differ, the model's made within `audit_timing_ms` after
    the broker's previous write committed, may each have taken back the follower that was at the HW first by its own
    clock. Margin: how long after the commit (+)."""
    w, o = case.write, case.observed
    if w is None or o is None or w.kind is not DecisionKind.EXPAND or o.event.kind != "expand" or _agrees(w, o):
        return None
    return _since_commit(p, w)


def margin(audit: Audit, p: PartitionAudit, case: Case, bound: Bound) -> int | None:
    """Kafka reads its clock per partition a few ms after its isr-expiration task starts (`getOutOfSyncReplicas`,
    Partition.scala 3.9 L1309-1315; the agent reports it: `check_ms`), the model at the task's start: a shrink whose
    deciding follower was within `audit_timing_ms` of the lag limit goes either way. Margin: how far past (+) or
    short of (-) the limit that follower was."""
    return case.margin_ms


def shifted(audit: Audit, p: PartitionAudit, case: Case, bound: Bound) -> int | None:
    """A broker puts a change in its batch set when its write commits (ZkAlterPartitionManager.scala 3.9 L74-79), the
    model when it decides; the model follows the broker's reported clocks at each run (SPEC §4.6), but a commit may
    still fall on the other side of a run than the model's view of it. A batch that carries a change or not depending
    on which side's time of it counts: at or after the change on one side (a run in the same ms as the model's
    decision may come after it) and before the next propagation run past its linger deadline on the other (a batch
    forced by the max delay takes it at once). Margin: how long after the earlier side's time of the change."""
    if case.carried_by_broker is None:
        return None
    reach = audit.linger + audit.propagation_period
    since = [case.ts - s.lo for s in p.spans if s.leader == case.broker and s.lo <= case.ts <= s.hi + reach]
    return min(since) if since else None


def displaced(audit: Audit, p: PartitionAudit, case: Case, bound: Bound) -> int | None:
    """A batch carries a change of the partition the other side sent in an earlier batch, within the max delay, with
    no send of it by this side since: the same change in another run. A change committed during a slow
    isr-expiration run goes in the broker's batch of a propagation run inside it; the model, which has it from the
    run's end, sends it with its next batch, which later changes can keep back past the linger deadline `shifted`
    allows for. Margin: how long after the other side's send."""
    mine = case.carried_by_broker
    if mine is None:
        return None
    sends = [s for s in p.sent if s.broker == case.broker]
    earlier = [s.ts for s in sends if s.by_broker != mine and bound.holds(case.ts - s.ts)]
    if not earlier:
        return None
    twin = max(earlier)
    if any(s.by_broker == mine and twin <= s.ts < case.ts for s in sends):
        return None
    return case.ts - twin


def deposed(audit: Audit, p: PartitionAudit, case: Case, bound: Bound) -> int | None:
    """A leader proposes from its own metadata (ReplicaManager@4.4.0 maybeShrinkIsr over the partitions it leads): a
    broker paused past its session (fenced) proposes on resuming as the leader it was, before it applies the metadata
    that moved its leadership on, which the model already took from the new leader. The controller refuses it
    (ReplicationControlManager@4.4.0 validateAlterPartitionData: FENCED_LEADER_EPOCH, the request's leader epoch
    older than the partition's). A proposal by a broker the model no longer has as the leader is timing: it hinges
    on when that broker applies the metadata. Margin: how long after the model's last LeaderAndIsr of the partition
    (none known: not timing)."""
    o = case.observed
    if o is None or not isinstance(o.event, ProposedIsr) or o.model_leader == o.event.leader:
        return None
    resynced = max((j for j in p.joins if j <= case.ts), default=None)
    return None if resynced is None else case.ts - resynced


def applying(audit: Audit, p: PartitionAudit, case: Case, bound: Bound) -> int | None:
    """AlterPartition: the leader's Partition applies a committed answer in handleAlterPartitionUpdate and the agent
    stamps its `isr_updated` at the method's exit, after the new state, the HW rule and the log line
    (Partition@3.9.0-rc3 L1953-1981; 4.4 alike); a fetch reads `partitionState.isInflight` without the partition's
    lock (L1023). So a fetch the model saw shortly before that stamp may have found the partition committed and
    proposed an expand, where the model, which commits at the stamp (`applies_answer`), found it in flight and
    expanded by another follower later (the KRaft lab under load: the broker's expand of the follower that fetched
    10 ms before the stamp, the model's of the next one to fetch). A broker expand adding a follower whose last
    fetch the model saw within `audit_timing_ms` before the broker's commit of the proposal's base epoch is timing.
    Margin: that fetch's time minus the commit's (<= 0)."""
    o = case.observed
    if o is None or not isinstance(o.event, ProposedIsr) or o.event.kind != "expand":
        return None
    committed = p.commits.get((o.event.leader, o.event.partition_epoch - 1))
    if committed is None:
        return None
    added = set(o.event.isr) - set(o.event.isr_before or o.event.isr)
    close = [m for r in o.evidence if r.replica in added and bound.holds(m := r.last_fetch_ms - committed)]
    return max(close) if close else None


def fetch_order(audit: Audit, p: PartitionAudit, case: Case, bound: Bound) -> int | None:
    """Kafka applies a follower's fetch on the request handler thread that read it (Partition@4.4 fetchRecords
    L1278: the read, then updateFollowerFetchState and maybeExpandIsr). Two followers' fetches on two threads within
    ms of each other are applied in either order, so either may be the one taken back first: on the KRaft 4.4.0 lab,
    with fetches stamped with `fetchTimeMs` (read before the log read), the fetch stamped 2 ms later was applied
    first (the agent's `seq` says so) and the leader added its follower, where the model, which orders by the stamps,
    added the other. An agent that stamps a fetch where it was applied (`fetch_ms` apart) leaves ties within a ms.
    Two expands from the same ISR that differ in the follower they add, where the broker's follower's last fetch (the
    model's record) came within `audit_timing_ms` of the model's decision, are timing. Margin: that fetch's time
    minus the decision's."""
    w, o = case.write, case.observed
    if w is None or o is None or w.kind is not DecisionKind.EXPAND or o.event.kind != "expand" or _agrees(w, o):
        return None
    if o.event.isr_before is None or sorted(o.event.isr_before) != sorted(w.isr_before):
        return None
    added = set(o.event.isr) - set(o.event.isr_before)
    close = [m for r in o.evidence if r.replica in added and bound.holds(m := r.last_fetch_ms - w.ts)]
    return min(close, key=abs) if close else None


def reproposed(audit: Audit, p: PartitionAudit, case: Case, bound: Bound) -> int | None:
    """AlterPartition: a leader proposes from the same base epoch again only when its first proposal's answer was not
    applied: the metadata committed or reset the partition after the proposal and before the answer, so the callback
    ignored the answer ("Ignoring failed ISR update … since we have already updated state", Partition@4.4
    submitAlterPartition) and the next fetch or check proposed from that epoch again, which the controller refused
    (INVALID_UPDATE_VERSION): the same ISR, or another where another follower fetched first. On the KRaft 4.4.0 lab
    the leader's first proposal came from a fetch that raced the commit of the epoch before (`applying`) and so
    preceded the metadata; the model's, made after the metadata, had its answer applied and no second. Nor can the
    model tell a first proposal sent after the metadata, behind another request, from one made after it
    (`partition.proposed_after_the_metadata`, which it takes it for: docs/evidence/kraft-answer-in-flight). A broker
    proposal with no partner of the model from the base epoch of the same leader's proposal of the partition within
    the audit window is timing. Margin: how long after the first."""
    o = case.observed
    if case.write is not None or o is None or not isinstance(o.event, ProposedIsr):
        return None
    ev = o.event
    first = [
        q.ts
        for q in p.proposed
        if (q.leader, q.partition_epoch) == (ev.leader, ev.partition_epoch) and bound.holds(ev.ts - q.ts)
    ]
    return ev.ts - min(first) if first else None


def split(audit: Audit, p: PartitionAudit, case: Case, bound: Bound) -> int | None:
    """After a timing divergence the two sides' views of the partition's ISR may follow different followers (a write
    in flight for a second after a broker resumed: the model re-added one follower, the broker another after its
    commit); a write the model made while the broker's previous one was in flight splits them even when both agree.
    Until a later pair of writes of the partition agrees again, or a LeaderAndIsr gives both sides the controller's
    state, its divergences are consequences. Margin: how long the views had been split."""
    since = p.split_since(case.ts)
    return None if since is None else case.ts - since


Check = Callable[["Audit", PartitionAudit, Case, Bound], int | None]


class Rule(NamedTuple):
    """A timing rule: the cause it names, its check (the case's margin under its reason), and how far that reason
    reaches (`bound`, from the audit's configuration: each says which Kafka timing or config key it comes from)."""

    name: Cause
    check: Check
    bound: Callable[[Audit], Bound]

    def applies(self, audit: Audit, p: PartitionAudit, case: Case) -> Excuse | None:
        """This rule's verdict on `case`: timing, with its margin, when its check gives one within its bound."""
        bound = self.bound(audit)
        found = self.check(audit, p, case, bound)
        return Excuse(self.name, found) if found is not None and bound.holds(found) else None


def _within_timing(audit: Audit) -> Bound:
    """A clock read or a race between threads: `audit_timing_ms` either way."""
    return Bound(-audit.timing_ms, audit.timing_ms)


def _views_rejoin(audit: Audit) -> Bound:
    """How long a split lasts at most: within replica.lag.time.max.ms plus one isr-expiration period
    (replicaLagTimeMaxMs / 2, ReplicaManager@3.9.0-rc3 L387) every follower either side kept or added wrongly is out
    of sync and shrunk, or caught up and added by the other side, so the two views agree again."""
    return Bound(0, audit.lag + audit.lag // 2)


RULES: tuple[Rule, ...] = (
    # A write stays in flight until its answer: the manager retries it until the controller answers, and the audit
    # waits for a held request at most SEND_HELD_MS (ZooKeeper mode: the client retries until its session expires,
    # zookeeper.session.timeout.ms 18 s, ZkConfigs@3.9.0-rc3 L86, within it).
    Rule(Cause.IN_FLIGHT, in_flight, lambda a: Bound(-SEND_HELD_MS, 0)),
    Rule(Cause.BOTH_EXPAND, both_expand, lambda a: Bound(1, a.timing_ms)),  # after the commit, a clock read later
    Rule(Cause.MARGIN, margin, _within_timing),
    # A change reaches a batch at its linger deadline (isr_change_linger_ms) plus one propagation run
    # (isr_change_check_interval_ms), after the later side's time of it, at most the audit window after the earlier.
    Rule(Cause.SHIFTED, shifted, lambda a: Bound(0, a.window + a.linger + a.propagation_period)),
    Rule(Cause.DISPLACED, displaced, lambda a: Bound(1, a.max_delay)),  # isr_change_max_delay_ms: forced into a batch
    # A deposed leader proposes at its first run after it resumes, before its metadata catches up; later than the
    # audit waits for any leader's held proposal (SEND_HELD_MS) after the state that deposed it, it counts.
    Rule(Cause.DEPOSED, deposed, lambda a: Bound(0, SEND_HELD_MS)),
    Rule(Cause.APPLYING, applying, lambda a: Bound(-a.timing_ms, 0)),  # a fetch just before the stamp of the commit
    Rule(Cause.FETCH_ORDER, fetch_order, _within_timing),
    Rule(Cause.REPROPOSED, reproposed, lambda a: Bound(1, a.window)),  # within the audit window of the first
    Rule(Cause.SPLIT, split, _views_rejoin),
)


def excuse(audit: Audit, p: PartitionAudit, case: Case) -> Excuse | None:
    """The first rule of `RULES` whose check gives `case` a margin within its bound: its cause and that margin;
    None: the divergence counts."""
    for rule in RULES:
        found = rule.applies(audit, p, case)
        if found is not None:
            return found
    return None


def same_run(audit: Audit, w: IsrWrite, o: Observation) -> bool:
    """Whether a pair that agrees on kind and ISR is one act, not a divergence: a shrink the broker checked within
    the model's isr-expiration run (Kafka checks each partition at its own clock during the run, SPEC §4.7:
    [ts, run_end_ms], give or take `audit_timing_ms`), or an expand the broker wrote at or after the model's
    decision (the same fetch: the broker's write lands after it)."""
    ev = o.event
    if isinstance(ev, ProposedIsr):
        return proposal_sent(audit, w, ev)
    if w.kind is DecisionKind.EXPAND:
        return w.ts <= ev.ts + audit.timing_ms
    return w.ts - audit.timing_ms <= _decided_at(ev) <= (w.run_end_ms or w.ts) + audit.timing_ms


def proposal_sent(audit: Audit, w: IsrWrite, ev: ProposedIsr) -> bool:
    """AlterPartition mode: the broker's request carrying the proposal left at or after the model decided it (Kafka
    submits at the decision and sends when no request of the broker is in flight, AlterPartitionManager@4.3.1
    L104-142), within the audit window of the decision or of the broker's first request after it (a queue held
    behind a request in flight goes with the next one, however late: `settles_at`): while it is pending, the
    partition proposes nothing else (SPEC §4.9 rule 1), so a request of the same epoch and ISR in that time is that
    decision's. The request carries no check clock, so a shrink the broker decided a run later than the model shows
    only as a later request."""
    return w.ts - audit.timing_ms <= ev.ts <= audit.settles_at(w, w.run_end_ms or w.ts) + audit.window


def _meet(epoch: Epoch, side: A, waiting: dict[Key, A], partners: dict[Key, B], due: Callable[[B], int]) -> B | None:
    """The other side's earliest proposal at the same epoch that agrees with `side` on kind and new ISR and was still
    waiting at `side`'s time (`waited_for`), taken out of `partners`; without one, `side` waits (`_waits`): a partner
    that differs may be another epoch's, and is judged when due."""
    for key in sorted(partners):
        partner = partners[key]
        if key[:2] == epoch and _side(partner)[:2] == _side(side)[:2] and waited_for(due(partner), side):
            return partners.pop(key)
    _waits(epoch, side, waiting)
    return None


def waited_for(due: int, side: IsrWrite | Observation) -> bool:
    """Whether a side due at `due` (judged alone once its cluster's time passes it) waited for `side`: only a side
    that came by then. A side that came later finds it judged in a stream that advanced in between and waiting in a
    one-pass replay, which advances once; that partner is no partner, in every cut. (A KRaft request held 16 s behind
    one in flight paired with the model's proposal in a replay and was judged apart in the stream.)"""
    return _side(side)[2] <= due


def _waits(epoch: Epoch, side: A, waiting: dict[Key, A]) -> None:
    """`side` waits as its side's next proposal of `epoch`: after every one of that epoch still waiting."""
    taken = [key[2] for key in waiting if key[:2] == epoch]
    waiting[(*epoch, max(taken, default=-1) + 1)] = side


def _decided_at(ev: IsrUpdated | ProposedIsr) -> int:
    """When the broker decided: a shrink's check clock (the agent reports it), else the write's (request's) time."""
    if isinstance(ev, IsrUpdated) and ev.kind == "shrink" and ev.check_ms is not None:
        return ev.check_ms
    return ev.ts


def _out_of_sync(ev: IsrUpdated | ProposedIsr) -> list[int]:
    """The followers a broker's shrink removed: as Kafka judged them, or those its proposal leaves out."""
    if isinstance(ev, IsrUpdated):
        return [r.replica for r in ev.out_of_sync]
    return sorted(set(ev.isr_before or ()) - set(ev.isr))


def _side(side: IsrWrite | Observation) -> tuple[DecisionKind, list[int], int]:
    """A side's kind, new ISR (sorted) and time."""
    if isinstance(side, Observation):
        return DecisionKind(side.event.kind), sorted(side.event.isr), side.event.ts
    return side.kind, side.isr, side.ts


def _nearest_alike(
    key: Key,
    side: tuple[DecisionKind, list[int], int],
    others: Mapping[Key, IsrWrite] | Mapping[Key, Observation],
    window: int,
) -> Key | None:
    """Of `others`, the write by `key`'s leader with `side`'s kind and ISR nearest to it in time, within `window`."""
    return nearest_alike(side, ((k, _side(o)) for k, o in others.items() if k[0] == key[0]), window)


def nearest_alike(
    side: tuple[DecisionKind, list[int], int],
    others: Iterable[tuple[SortedKey, tuple[DecisionKind, list[int], int]]],
    window: int,
) -> SortedKey | None:
    """How a write is paired when partition epochs cannot pair it: of `others` (one partition's writes, each a key
    and its kind, new ISR (sorted) and time), the key of the one with `side`'s kind and ISR nearest to it in time
    within `window` (ties: the smaller key). The latency benchmark pairs the brokers' writes with it too."""
    kind, isr, ts = side
    best: tuple[int, SortedKey] | None = None
    for other_key, (other_kind, other_isr, other_ts) in others:
        if other_kind is kind and other_isr == isr and abs(other_ts - ts) <= window:
            candidate = (abs(other_ts - ts), other_key)
            best = candidate if best is None or candidate < best else best
    return None if best is None else best[1]


def _partner(
    key: Key,
    side: IsrWrite | Observation,
    others: Mapping[Key, IsrWrite] | Mapping[Key, Observation],
    mine: Mapping[Key, IsrWrite] | Mapping[Key, Observation],
    window: int,
) -> Key | None:
    """The other side's write a settled side is judged with. First one of the same leader, kind and new ISR within
    the window, at any partition epoch: once one write is missed or extra, the model's epochs run off the broker's
    until the next LeaderAndIsr, and the writes after it still match (the nearest in time). Else the earliest write
    of the same epoch that has no such match of its own among this side's."""
    drifted = _nearest_alike(key, _side(side), others, window)
    if drifted is not None:
        return drifted
    for same in sorted(k for k in others if k[:2] == key[:2]):
        if _nearest_alike(same, _side(others[same]), mine, window) is None:
            return same
    return None


def _lag_margin(evidence: list[ReplicaView], at: int, replicas: Iterable[int], lag: int) -> int | None:
    """How far past the lag limit the first of `replicas` to pass it was at `at`, by the model's record."""
    concerned = set(replicas)
    margins = [at - r.last_caught_up_ms - lag for r in evidence if r.replica in concerned]
    return max(margins) if margins else None


class Audit:
    """Pending sides of every audited write and batch, paired as they come and judged once settled."""

    def __init__(self, config: Config, blob: bytes | None = None) -> None:
        self.lag: int = config.replica_lag_time_max_ms
        self.window: int = config.audit_window
        self.timing_ms: int = config.audit_timing_ms
        self.linger: int = config.isr_change_linger_ms
        # Kafka runs isr-change-propagation every 2.5 s (ReplicaManager.scala, ZooKeeper mode); the agent profile
        # sets no period of the model's own.
        self.propagation_period: int = config.isr_change_check_interval_ms or 2500
        # A batch carries a change at most the max delay after it; the batch is judged a window later. A proposal
        # waits for its broker's request at most SEND_HELD_MS.
        self.max_delay: int = config.isr_change_max_delay_ms
        self.kept = max(self.max_delay, SEND_HELD_MS) + self.window
        self.state = _AuditState(STATE_VERSION) if blob is None else _decode(blob)
        self.partitions = self.state.partitions
        self.brokers = self.state.brokers  # the brokers that report: their writes and batches are audited
        self.touched: set[PartitionKey] = set()  # partitions whose marks may have changed (`marks`)
        self.new_brokers: list[BrokerKey] = []  # brokers first audited here (a state key tells the driver)

    def to_bytes(self) -> bytes:
        return _encoder.encode(self.state)

    def is_empty(self) -> bool:
        return not (self.partitions or self.brokers)

    def pending(self) -> int:
        """Sides still waiting for a partner or for their cluster's time to pass the window."""
        return sum(len(p.writes) + len(p.observed) for p in self.partitions.values()) + sum(
            len(b.batches) + len(b.propagated) for b in self.brokers.values()
        )

    def _partition(self, cluster: str, topic: str, partition: int) -> PartitionAudit:
        key = (cluster, topic, partition)
        self.touched.add(key)
        return self.partitions.setdefault(key, PartitionAudit())

    def _broker(self, cluster: str, broker: int) -> BrokerAudit:
        found = self.brokers.get((cluster, broker))
        if found is None:
            found = self.brokers[(cluster, broker)] = BrokerAudit()
            self.new_brokers.append((cluster, broker))
        return found

    def settles_at(self, w: IsrWrite, decided: int) -> int:
        """When the model's write was made, as far as its broker's requests show: its decision (`decided`); for the
        proposal of a broker that reports its AlterPartition requests, its broker's first request at or after the
        decision, which carries everything queued. A KRaft 4.4.0 broker decided five shrinks during a controller
        failover and sent them 16 s later, when its request in flight was answered: judged at the decision's window,
        each was unexplained_by_model and its request missed_by_model. The wait ends `SEND_HELD_MS` after the decision
        if the broker sends nothing."""
        broker = self.brokers.get((w.cluster, w.broker))
        if broker is None or not broker.reports_sends:
            return decided
        first = broker.first_send(w.ts)
        held = w.ts + SEND_HELD_MS
        return max(decided, held if first is None else min(first, held))

    def add(
        self,
        writes: Iterable[IsrWrite] = (),
        observed: Sequence[Observation | BrokerObserved] = (),
        batches: Iterable[Propagation] = (),
        resyncs: Iterable[tuple[str, str, int, int]] = (),
        pair: bool = True,
    ) -> list[Divergence]:
        """Take new sides; ISR writes that find their partner are judged at once (batches wait for `advance`:
        their verdict may rest on ISR timing divergences not yet judged). Only the batches of brokers that
        report (whose writes are audited or who reported writes) are audited. `resyncs`: the (cluster, topic,
        partition, ts) of the model's LeaderAndIsr decisions. `pair=False`: the state keys paired the ISR writes
        (`pair`), this takes only the batches."""
        out = self.pair_writes(writes, observed, resyncs) if pair else []
        for o in observed:
            if isinstance(o, IsrChangePropagated):
                self._broker(o.cluster, o.broker).propagated[o.ts] = o
                self._record_sent(o, by_broker=True)
        for b in batches:
            broker = self.brokers.get((b.cluster, b.broker))
            if broker is not None:
                broker.batches[b.ts] = b
                self._record_sent(b, by_broker=False)
        return out

    def pair_writes(
        self,
        writes: Iterable[IsrWrite],
        observed: Sequence[Observation | BrokerObserved],
        resyncs: Iterable[tuple[str, str, int, int]],
    ) -> list[Divergence]:
        """The partitions' side of `add`: the model's ISR writes and the brokers' paired as they come (a broker's
        batches are `add`'s)."""
        out: list[Divergence] = []
        for o in observed:  # first: a proposal in this call is judged against its broker's requests (`settles_at`)
            if isinstance(o, AlterPartitionSent):
                sender = self._broker(o.cluster, o.broker)
                sender.reports_sends = True
                insort(sender.sends, o.ts)
        for cluster, topic, partition, ts in resyncs:
            self._partition(cluster, topic, partition).joins.append(ts)
        for w in writes:
            self._broker(w.cluster, w.broker)
            p = self._partition(w.cluster, w.topic, w.partition)
            partner = _meet((w.broker, w.partition_epoch), w, p.writes, p.observed, self.due)
            if partner is not None:
                self._judge_pair(p, w, partner, out)
        for o in observed:
            if isinstance(o, Observation) and isinstance(o.event, IsrUpdated):  # a commit, audited or not
                self._partition(o.event.cluster, o.event.topic, o.event.partition).commits[
                    (o.event.leader, o.event.partition_epoch)
                ] = o.event.ts
            if not isinstance(o, Observation) or not o.audited:
                continue  # a request is audited by its partitions' proposals; a commit by its proposal
            ev = o.event
            self._broker(ev.cluster, ev.leader)
            p = self._partition(ev.cluster, ev.topic, ev.partition)
            if isinstance(ev, ProposedIsr):
                p.proposed.append(Proposed(ev.leader, ev.partition_epoch, tuple(sorted(ev.isr)), ev.ts))
            mine = _meet((ev.leader, ev.partition_epoch), o, p.observed, p.writes, self.due)
            if mine is not None:
                self._judge_pair(p, mine, o, out)
        return out

    def pair(
        self,
        writes: Iterable[IsrWrite],
        observed: Sequence[Observation | BrokerObserved],
        resyncs: Iterable[tuple[str, str, int, int]],
        until: int | Mapping[str, int],
    ) -> tuple[list[Divergence], list[Marks]]:
        """A state key's audit of its own partitions (SPEC §7): their ISR writes paired as they come and judged once
        `until` passes them, and the marks the driver's batch verdicts look back on (`take`), before the key forgets
        what its later verdicts no longer need. The driver judges the batches: they are cluster-wide."""
        out = self.pair_writes(writes, observed, resyncs)
        self._judge_writes(until, out)
        marks = self.marks()
        self._prune(until)
        return out, marks

    def marks(self) -> list[Marks]:
        """The marks of the partitions touched since the last call, sorted. A partition's joins go with its splits
        only (`split_since` reads no join but after a split): a LeaderAndIsr joins every audited partition, and the
        driver need not hold them all. A split comes within the window of what it splits (its side was not yet due
        at the last call), so the joins after it are still here when it goes."""
        out = []
        for key in sorted(self.touched):
            p = self.partitions.get(key)
            if p is not None and (p.spans or p.splits):
                out.append(Marks(*key, list(p.spans), list(p.splits), list(p.joins) if p.splits else []))
        self.touched.clear()
        return out

    def take(self, marks: Iterable[Marks], brokers: Iterable[BrokerKey]) -> None:
        """A state key's `pair`: the brokers it audits (their batches are audited) and its partitions' marks, added
        to what the driver has of them (it forgets them at its own, later, horizon)."""
        for cluster, broker in brokers:
            self._broker(cluster, broker)
        for m in marks:
            p = self._partition(m.cluster, m.topic, m.partition)
            p.spans = sorted(set(p.spans) | set(m.spans), key=lambda s: (s.lo, s.hi, s.leader))
            p.splits = sorted(set(p.splits) | set(m.splits))
            p.joins = sorted(set(p.joins) | set(m.joins))

    def _record_sent(self, batch: Propagation | IsrChangePropagated, by_broker: bool) -> None:
        for tp in batch.partitions:
            self._partition(batch.cluster, tp.topic, tp.partition).sent.append(Send(batch.broker, batch.ts, by_broker))

    def advance(self, until: int | Mapping[str, int]) -> list[Divergence]:
        """Judge every side its cluster's time (`until`: one for all, or one per cluster) has passed by the
        window: ISR writes first, then batches; then forget what no later verdict looks back on."""
        out: list[Divergence] = []
        self._judge_writes(until, out)
        for (cluster, who), broker in sorted(self.brokers.items()):
            at = _at(until, cluster)
            for ts in sorted(set(broker.batches) | set(broker.propagated)):
                if at is not None and ts + self.window < at:
                    self._judge_batch(
                        cluster, who, ts, broker.batches.pop(ts, None), broker.propagated.pop(ts, None), out
                    )
        self._prune(until)
        return out

    def _judge_writes(self, until: int | Mapping[str, int], out: list[Divergence]) -> None:
        for key in sorted(self.partitions):  # sorted: the same order whatever the arrival
            at = _at(until, key[0])
            p = self.partitions[key]
            if at is not None and (p.writes or p.observed):
                self.touched.add(key)
                self._judge_due_writes(p, at, out)

    def _prune(self, until: int | Mapping[str, int]) -> None:
        """Forget what no later verdict looks back on."""
        for key, p in list(self.partitions.items()):
            at = _at(until, key[0])
            if at is not None:
                p.prune(at - self.window - self.kept)
                if p.is_empty():
                    del self.partitions[key]
        for (cluster, _), broker in self.brokers.items():
            at = _at(until, cluster)
            if at is not None:  # a write waits for a request at most SEND_HELD_MS (< kept)
                del broker.sends[: bisect_left(broker.sends, at - self.window - self.kept)]

    def due(self, side: IsrWrite | Observation) -> int:
        """When a side waiting for its partner is judged alone, once its cluster's time has passed it: the window
        after it was made (`settles_at`) or observed."""
        if isinstance(side, IsrWrite):
            return self.settles_at(side, side.ts) + self.window
        return side.event.ts + self.window

    def _judge_due_writes(self, p: PartitionAudit, at: int, out: list[Divergence]) -> None:
        """Judge the partition's sides due before `at`: the model's writes, then the brokers', each with a partner
        that came while it waited (`waited_for`)."""
        for key, w in sorted(p.writes.items()):
            due = self.due(w)
            if due < at:
                del p.writes[key]
                came = {k: o for k, o in p.observed.items() if waited_for(due, o)}
                partner = _partner(key, w, came, p.writes, self.window)
                if partner is None:
                    self._judge_write_alone(p, w, out)
                else:
                    self._judge_pair(p, w, p.observed.pop(partner), out)
        for key, o in sorted(p.observed.items()):
            due = self.due(o)
            if due < at:
                del p.observed[key]
                came_w = {k: w for k, w in p.writes.items() if waited_for(due, w)}
                mine = _partner(key, o, came_w, p.observed, self.window)
                if mine is None:
                    self._judge_observed_alone(p, o, out)
                else:
                    self._judge_pair(p, p.writes.pop(mine), o, out)

    # The verdicts

    def _judge_pair(self, p: PartitionAudit, w: IsrWrite, o: Observation, out: list[Divergence]) -> None:
        ev = o.event
        p.spans.append(Span(w.broker, min(w.ts, ev.ts), max(w.ts, ev.ts)))
        if not _agrees(w, o):
            out.append(self._isr_divergence(p, DivergenceKind.DIFFERENT_ISR, w, o, None))
            return
        since = _since_commit(p, w)
        made_in_flight = since is not None and since <= 0
        if made_in_flight:
            # The same write, but the model made it while the broker's previous one was in flight: the followers
            # it saw then are not the ones Kafka saw after the commit, so the two views are split from here.
            p.splits.append(w.ts)
        if not same_run(self, w, o):
            kind, lag_margin = self._first_side(w, o)
            out.append(self._isr_divergence(p, kind, w, o, lag_margin))
        if not made_in_flight:
            p.joins.append(min(w.ts, ev.ts))  # both sides wrote the same ISR: their views agree again

    def _first_side(self, w: IsrWrite, o: Observation) -> tuple[DivergenceKind, int | None]:
        """A pair that agrees but was not one act: which side wrote first, with a shrink's lag margin at its check."""
        ev = o.event
        broker_at = _decided_at(ev)
        if w.kind is DecisionKind.EXPAND:  # the model took the follower back only later
            return DivergenceKind.MISSED_BY_MODEL, None
        if w.ts < broker_at:  # the model shrank first; the broker did not at that run
            return DivergenceKind.UNEXPLAINED_BY_MODEL, _lag_margin(w.evidence, w.ts, map(int, w.reasons), self.lag)
        # the broker shrank first; the model only at a later run
        return DivergenceKind.MISSED_BY_MODEL, _lag_margin(o.evidence, broker_at, _out_of_sync(ev), self.lag)

    def _judge_write_alone(self, p: PartitionAudit, w: IsrWrite, out: list[Divergence]) -> None:
        lag_margin = _lag_margin(w.evidence, w.ts, [int(r) for r in w.reasons], self.lag) if w.reasons else None
        d = self._isr_divergence(p, DivergenceKind.UNEXPLAINED_BY_MODEL, w, None, lag_margin)
        if d.cause is not None and d.cause is not Cause.SPLIT:
            p.spans.append(Span(w.broker, w.ts, w.ts))  # a timing of its own: the batches may differ by it
        out.append(d)

    def _judge_observed_alone(self, p: PartitionAudit, o: Observation, out: list[Divergence]) -> None:
        ev = o.event
        lag_margin = None
        if ev.kind == "shrink":
            lag_margin = _lag_margin(o.evidence, _decided_at(ev), _out_of_sync(ev), self.lag)
        d = self._isr_divergence(p, DivergenceKind.MISSED_BY_MODEL, None, o, lag_margin)
        if d.cause is not None and d.cause is not Cause.SPLIT:
            p.spans.append(Span(ev.leader, ev.ts, ev.ts))
        out.append(d)

    def _isr_divergence(
        self,
        p: PartitionAudit,
        kind: DivergenceKind,
        w: IsrWrite | None,
        o: Observation | None,
        lag_margin: int | None,
    ) -> Divergence:
        """The divergence of an ISR write (`kind` unless a rule excuses it); an excused one splits the views."""
        ev = o.event if o is not None else None
        ts = min(side.ts for side in (w, ev) if side is not None)
        if w is not None:
            cluster, broker, topic, partition, epoch = w.cluster, w.broker, w.topic, w.partition, w.partition_epoch
        else:
            assert ev is not None
            cluster, broker, topic, partition, epoch = ev.cluster, ev.leader, ev.topic, ev.partition, ev.partition_epoch
        found = excuse(self, p, Case(ts, broker, w, o, margin_ms=lag_margin))
        if found is not None and found.cause is not Cause.SPLIT:
            p.splits.append(ts)
        return Divergence(
            ts=ts,
            cluster=cluster,
            broker=broker,
            kind=kind if found is None else DivergenceKind.TIMING,
            cause=None if found is None else found.cause,
            subject="isr",
            topic=topic,
            partition=partition,
            partition_epoch=epoch,
            model=w,
            observed=ev,
            evidence=(o.evidence if o is not None else []) if w is None or not w.evidence else w.evidence,
            margin_ms=lag_margin if found is None else found.margin_ms,
        )

    def _judge_batch(
        self,
        cluster: str,
        who: int,
        ts: int,
        b: Propagation | None,
        p: IsrChangePropagated | None,
        out: list[Divergence],
    ) -> None:
        """A batch pair (or lone batch) is timing when a rule excuses every partition only one side carried; the
        first of those partitions names the cause."""
        model = {(tp.topic, tp.partition) for tp in b.partitions} if b else set()
        broker = {(tp.topic, tp.partition) for tp in p.partitions} if p else set()
        if b is not None and p is not None and model == broker:
            return
        nothing = PartitionAudit()
        excuses = [
            excuse(self, self.partitions.get((cluster, t, n), nothing), Case(ts, who, carried_by_broker=tp in broker))
            for tp in sorted(model ^ broker)
            for t, n in [tp]
        ]
        found = excuses[0] if all(e is not None for e in excuses) else None
        if found is not None:
            kind = DivergenceKind.TIMING
        elif b is None:
            kind = DivergenceKind.MISSED_BY_MODEL
        elif p is None:
            kind = DivergenceKind.UNEXPLAINED_BY_MODEL
        else:
            kind = DivergenceKind.DIFFERENT_BATCH
        out.append(
            Divergence(
                ts=ts,
                cluster=cluster,
                broker=who,
                kind=kind,
                cause=None if found is None else found.cause,
                subject="propagation",
                model=b,
                observed=p,
                margin_ms=None if found is None else found.margin_ms,
            )
        )


def _at(until: int | Mapping[str, int], cluster: str) -> int | None:
    """`cluster`'s time in `until` (one for all, or one per cluster; None: not advanced)."""
    return until if isinstance(until, int) else until.get(cluster)


def sorted_divergences(divergences: Iterable[Divergence]) -> list[Divergence]:
    """A stable order for outputs: by time, cluster, broker, partition."""
    return sorted(
        divergences, key=lambda d: (d.ts, d.cluster, d.broker, d.subject, d.topic or "", d.partition or -1, d.kind)
    )
