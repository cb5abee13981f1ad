"""Incidents: one cause and everything it did (SPEC §8), and the timeline's history, from low-volume inputs only.

The book takes the decisions, the partitions' health where a decision or a commit may change it
(`PartitionHealth`), the AlterPartition requests answered and in flight, and the audit's divergences: never
every partition record. It applies the ordered ones (decisions, health) in event time, each cluster up to its
settled frontier, so the same events give the same incidents in `replay` and in the stream however they are
cut. Each kind is one numbered rule (`RULES`, Burrow's evaluator style); every kind closes the same way
(`closes`): when each partition it touched is back to its full ISR, nothing of it is pending and no input
joined it for `incident_window_ms`. It closes at the time its last partition came back (or its last
request was answered, its last divergence seen).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any, TypeVar

import msgspec
from msgspec import Struct

from .config import Config
from .events import BrokerRegistration
from .partition import REVERTING_ERRORS, STUCK_ERRORS
from .propagation import PropagationBook
from .records import (
    HEALTH_RANK,
    AlterPartitionRequest,
    BrokerRecord,
    Decision,
    DecisionKind,
    Divergence,
    DivergenceKind,
    Health,
    IsrCommitted,
    PartitionHealth,
    Propagation,
    ShrinkReason,
)

PartitionKey = tuple[str, str, int]
T = TypeVar("T")
# An AlterPartition request or queue shorter than this is no interval of the timeline: a request normally returns in
# milliseconds, and a lane of those would hide the one that did not.
TIMELINE_MIN_INTERVAL_MS = 1000
MAX_DECISIONS = 500  # an incident lists at most this many of its decisions (`decision_count` counts them all)


class IncidentKind(StrEnum):
    """What an incident is about (`RULES`)."""

    STUCK = "stuck"
    SLOW = "slow"
    OFFLINE = "offline"
    CONTROLLER = "controller"
    ISR_CHANGE_PENDING = "isr_change_pending"
    DIVERGENCE = "divergence"


FOLLOWER_KINDS = (IncidentKind.STUCK, IncidentKind.SLOW)  # one follower broker's shrinks: one incident, either reason


class StateInterval(Struct, kw_only=True):
    """A partition's state while an incident held it; `end_ms` None: still so."""

    state: Health
    start_ms: int
    end_ms: int | None = None


class IncidentPartition(Struct, kw_only=True):
    """A partition an incident touched: the worst state it reached (None: it stayed at its full ISR) and when."""

    topic: str
    partition: int
    worst: Health | None = None
    intervals: list[StateInterval] = []


class Incident(Struct, kw_only=True):
    """One cause and everything it did. `last_ms`: its last join (it stays open `incident_window_ms` past it);
    `quiet_ms`: when its last effect ended, its `closed_ms` once it closes."""

    id: str
    cluster: str
    kind: IncidentKind
    brokers: list[int]
    opened_ms: int
    closed_ms: int | None = None
    summary: str = ""
    partition_count: int = 0
    worst: Health | None = None
    under_min_isr_ms: int = 0  # the union of its partitions' under-min-ISR intervals (NOT_ENOUGH_REPLICAS for acks=all)
    leaders: list[int] = []  # the leaders that removed its brokers, or sent its requests
    counts: dict[str, int] = {}  # by reason (stuck, slow) or divergence kind
    controller_epoch: int | None = None
    offline_ms: int | None = None  # when the controller removed its broker (`offline`: at or after it opened)
    decision_count: int = 0
    last_ms: int = 0
    quiet_ms: int = 0
    pending: list[int] = []  # the send times of its AlterPartition requests still in flight
    held: list[int] = []  # its brokers the controller has fenced, until unfenced
    partitions: list[IncidentPartition] = []
    decisions: list[Decision] = []

    def to_record(self) -> dict[str, Any]:
        """The incident as the outputs show it (incidents.jsonl, GET /v1/incidents/{id}): without the book's own
        fields (`INTERNAL_FIELDS`)."""
        record: dict[str, Any] = msgspec.to_builtins(self)
        for name in INTERNAL_FIELDS:
            del record[name]
        return record


# An incident's fields that only the book reads: when it last joined, when its effects ended, what is in flight.
INTERNAL_FIELDS = ("last_ms", "quiet_ms", "pending", "held")


class CountPoint(Struct, kw_only=True):
    """A cluster's partition counts from `ts` on (Kafka's UnderReplicatedPartitions, UnderMinIsrPartitionCount,
    OfflinePartitionsCount): one point where they changed."""

    cluster: str
    ts: int
    under_replicated: int
    under_min_isr: int
    offline: int


class BrokerInterval(Struct, kw_only=True):
    """A broker's lane on the timeline: an interval of `kind` (out_of_sync, offline, leading_fewer,
    alter_partition_in_flight, alter_partition_queue) on `partitions` partitions (its most)."""

    cluster: str
    broker: int
    kind: str
    start_ms: int
    end_ms: int | None = None
    partitions: int = 0


class Marker(Struct, kw_only=True):
    """A moment on the timeline: a shrink, expand, controller change, propagation batch or divergence."""

    cluster: str
    ts: int
    kind: str
    broker: int | None = None
    topic: str | None = None
    partition: int | None = None
    text: str = ""


class Timeline(Struct, kw_only=True):
    """What a step adds to the timeline: count points, intervals opened or changed (by their start), markers, and
    per cluster the time before which the store keeps none (`timeline_retention_ms`)."""

    counts: list[CountPoint] = []
    intervals: list[BrokerInterval] = []
    markers: list[Marker] = []
    horizons: dict[str, int] = {}


class _Request(Struct, frozen=True):
    """An AlterPartition request as an ordered input of rule 4: at `ts` it has been in flight too long, or (`answered`)
    its last answer came."""

    ts: int
    cluster: str
    request: AlterPartitionRequest
    answered: bool


_Ordered = Decision | PartitionHealth | BrokerRegistration | _Request


class _State(Struct, array_like=True):
    decisions: list[Decision]
    states: list[PartitionHealth]
    registrations: list[BrokerRegistration]
    fenced: list[tuple[str, int, list[tuple[int, bool]], bool]]  # cluster, broker, reports by reporter, fenced
    health: list[PartitionHealth]
    causes: list[tuple[int, Decision]]
    counts: dict[str, list[int]]
    out_of_sync: list[tuple[str, int, int]]
    lost: list[tuple[str, int, list[tuple[str, int]]]]
    controller: dict[str, int]
    open: list[Incident]
    intervals: list[BrokerInterval]
    now: dict[str, int]
    proposed: list[tuple[int, Decision]] = []


_encode = msgspec.msgpack.encode
_state = msgspec.msgpack.Decoder(_State)


class IncidentBook:
    """The open incidents and the timeline's running state, kept by the sink as a blob between batches."""

    def __init__(self, config: Config, blob: bytes | None = None) -> None:
        self.window = config.incident_window_ms
        self.pending_ms = config.isr_change_pending_ms
        self.retention = config.timeline_retention_ms
        self.buffer: list[Decision | PartitionHealth | BrokerRegistration] = []
        # A broker's registration as each reporter last had it (fenced or not), and whether it counts as fenced.
        self.fenced: dict[tuple[str, int], tuple[dict[int, bool], bool]] = {}
        self.health: dict[PartitionKey, PartitionHealth] = {}  # partitions not at their full ISR
        self.causes: dict[tuple[str, str, int, int], Decision] = {}  # why a replica left a partition's ISR
        self.counts: dict[str, list[int]] = {}  # cluster -> [under_replicated, under_min_isr, offline]
        self.out_of_sync: dict[tuple[str, int], int] = {}  # follower broker -> partitions it is out of the ISR of
        self.lost: dict[tuple[str, int], set[tuple[str, int]]] = {}  # broker -> partitions it no longer leads
        self.controller: dict[str, int] = {}  # cluster -> the highest controller epoch seen
        self.open: dict[str, Incident] = {}
        self.intervals: dict[tuple[str, int, str], BrokerInterval] = {}  # the open ones
        self.now: dict[str, int] = {}  # cluster -> how far the book has applied it
        # The leaders' shrinks and expands not committed yet, by partition and replica (`_commits`).
        self.proposed: dict[PartitionKey, dict[int, Decision]] = {}
        if blob is not None:
            s = _state.decode(blob)
            self.buffer = [*s.decisions, *s.states, *s.registrations]
            self.fenced = {(c, b): (dict(reports), now) for c, b, reports, now in s.fenced}
            self.health = {(h.cluster, h.topic, h.partition): h for h in s.health}
            self.causes = {(d.cluster, d.topic, d.partition, r): d for r, d in s.causes}
            self.counts = s.counts
            self.out_of_sync = {(c, b): n for c, b, n in s.out_of_sync}
            self.lost = {(c, b): {(t, p) for t, p in ps} for c, b, ps in s.lost}
            self.controller = s.controller
            self.open = {i.id: i for i in s.open}
            self.intervals = {(i.cluster, i.broker, i.kind): i for i in s.intervals}
            self.now = s.now
            for r, d in s.proposed:
                self.proposed.setdefault((d.cluster, d.topic, d.partition), {})[r] = d
        # The open incidents each partition is in, with its part of each: a partition's input finds them by key,
        # not by walking every open incident's partitions (an incident may hold most of a cluster).
        self._parts: dict[PartitionKey, dict[str, IncidentPartition]] = {}
        for i in self.open.values():
            for p in i.partitions:
                self._parts.setdefault((i.cluster, p.topic, p.partition), {})[i.id] = p
        self._changed: dict[str, Incident] = {}
        self._opened: list[str] = []
        self._timeline = Timeline()
        self._points: dict[tuple[str, int], CountPoint] = {}
        self._touched: dict[tuple[str, int, str, int], BrokerInterval] = {}
        self._committed: list[IsrCommitted] = []

    def to_bytes(self) -> bytes:
        return _encode(
            _State(
                [x for x in self.buffer if isinstance(x, Decision)],
                [x for x in self.buffer if isinstance(x, PartitionHealth)],
                [x for x in self.buffer if isinstance(x, BrokerRegistration)],
                [(c, b, sorted(reports.items()), now) for (c, b), (reports, now) in self.fenced.items()],
                list(self.health.values()),
                [(k[3], d) for k, d in self.causes.items()],
                self.counts,
                [(c, b, n) for (c, b), n in self.out_of_sync.items()],
                [(c, b, sorted(ps)) for (c, b), ps in self.lost.items()],
                self.controller,
                list(self.open.values()),
                list(self.intervals.values()),
                self.now,
                [(r, d) for held in self.proposed.values() for r, d in held.items()],
            )
        )

    # -- the step

    def clusters(self, book: PropagationBook) -> set[str]:
        """Every cluster the book or the propagation book holds anything of (a replay's one `until` is theirs)."""
        return {x.cluster for x in self.buffer} | self.now.keys() | set(book.clusters)

    def add(
        self,
        decisions: Iterable[Decision],
        states: Iterable[PartitionHealth],
        registrations: Iterable[BrokerRegistration] = (),
    ) -> None:
        """Buffer the ordered inputs: they apply once their cluster's frontier passes them."""
        self.buffer.extend(d for d in decisions if d.kind is not DecisionKind.REJECTED)
        self.buffer.extend(states)
        self.buffer.extend(registrations)

    def advance(
        self,
        frontiers: Mapping[str, int],
        requests: Iterable[AlterPartitionRequest] = (),
        brokers: Iterable[BrokerRecord] = (),
        divergences: Iterable[Divergence] = (),
        propagations: Iterable[Propagation] = (),
    ) -> tuple[list[Incident], list[Incident], Timeline, list[IsrCommitted]]:
        """Apply every buffered input before its cluster's frontier in event time, then the step's cluster-wide inputs;
        returns the incidents opened and every incident changed (as they are now), the timeline's additions, and the
        replicas whose shrink or expand committed (`_commits`)."""
        held: list[Decision | PartitionHealth | BrokerRegistration] = []
        buffered: list[Decision | PartitionHealth | BrokerRegistration] = []
        for item in self.buffer:
            (buffered if item.ts < frontiers.get(item.cluster, item.ts) else held).append(item)
        self.buffer = held
        ordered = self._requests(requests, brokers, frontiers)
        due: list[_Ordered] = [*self._without_quiet(buffered, ordered), *ordered]
        due.sort(key=_order)
        for x in due:
            self._close_due(x.cluster, x.ts)
            if isinstance(x, Decision):
                self._take_decision(x)
            elif isinstance(x, PartitionHealth):
                self._take_state(x)
            elif isinstance(x, BrokerRegistration):
                broker_fenced(self, x)
            else:
                isr_change_pending(self, x)
                if x.answered:
                    self._refused(x.request)
            self.now[x.cluster] = max(self.now.get(x.cluster, x.ts), x.ts)
        for d in divergences:
            if d.kind is not DivergenceKind.TIMING:
                divergence(self, d)
        for p in propagations:
            self._mark(p.cluster, p.ts, "propagation", p.broker, None, None, _propagation_text(p))
        for cluster, at in sorted(frontiers.items()):
            self.now[cluster] = max(self.now.get(cluster, at), at)
            self._close_due(cluster, at)
            self._timeline.horizons[cluster] = at - self.retention
        for i in self.open.values():  # its under_min_isr_ms grows with its cluster's time: this step's is its latest
            if any(s.end_ms is None and s.state is Health.UNDER_MIN_ISR for p in i.partitions for s in p.intervals):
                self._changed[i.id] = i
        return self._flush()

    def _requests(
        self, answered: Iterable[AlterPartitionRequest], brokers: Iterable[BrokerRecord], frontiers: Mapping[str, int]
    ) -> list[_Request]:
        """The AlterPartition requests as ordered inputs (rule 4): the moment one has been in flight
        `isr_change_pending_ms`, the moment it was answered. A request the book already holds as pending opened
        before; its queue, as a lane of the timeline."""
        pending = {(i.cluster, i.brokers[0], t) for i in self.open.values() for t in i.pending}
        out = []
        for done in answered:
            assert done.response_ms is not None, "an answered request"
            late = done.response_ms - done.sent_ms >= self.pending_ms
            if late and (done.cluster, done.broker, done.sent_ms) not in pending:
                out.append(_Request(done.sent_ms + self.pending_ms, done.cluster, done, False))
            out.append(_Request(done.response_ms, done.cluster, done, True))
        for b in brokers:
            at = frontiers.get(b.cluster)
            if at is None:
                continue
            r = b.in_flight
            if r is not None and at - r.sent_ms >= self.pending_ms and (b.cluster, b.broker, r.sent_ms) not in pending:
                out.append(_Request(r.sent_ms + self.pending_ms, r.cluster, r, False))
            if r is not None and at - r.sent_ms >= TIMELINE_MIN_INTERVAL_MS:
                self._interval(b.cluster, b.broker, "alter_partition_in_flight", r.sent_ms, None, len(r.partitions))
            if b.queue:
                start = min(i.submitted_ms for i in b.queue)
                if at - start >= TIMELINE_MIN_INTERVAL_MS:
                    self._interval(b.cluster, b.broker, "alter_partition_queue", start, None, len(b.queue))
        return out

    def _flush(self) -> tuple[list[Incident], list[Incident], Timeline, list[IsrCommitted]]:
        changed = [self._snapshot(i) for i in self._changed.values()]
        opened = [c for c in changed if c.id in self._opened]
        timeline = self._timeline
        timeline.counts = sorted(self._points.values(), key=lambda p: (p.cluster, p.ts))
        timeline.intervals = [_copy(i, BrokerInterval) for i in self._touched.values()]
        committed, self._committed = self._committed, []
        self._changed, self._opened, self._timeline, self._points, self._touched = {}, [], Timeline(), {}, {}
        return opened, sorted(changed, key=lambda i: (i.opened_ms, i.id)), timeline, committed

    def _without_quiet(
        self, due: list[Decision | PartitionHealth | BrokerRegistration], requests: list[_Request]
    ) -> list[Decision | PartitionHealth | BrokerRegistration]:
        """The due inputs less those of quiet partitions, so that a batch that settles every partition (each one's
        first LeaderAndIsr and health) costs a few lookups per partition, not the ordered walk. A partition is quiet
        when the book holds nothing of it (not short of its ISR, no proposal or cause, no leadership lost, in no open
        incident, in none of this step's requests) and each of its inputs leaves it so: a LeaderAndIsr that removes
        no replica, a health at the full ISR under the same leader. Such an input changes nothing but its
        cluster's controller epoch (rule 3), and of those only the first of each higher epoch can: it stays in. An
        incident a left-out input would have closed closes at the next input or the frontier, at the same time."""
        if not due:
            return due
        busy = self.health.keys() | self.proposed.keys() | self._parts.keys()
        busy |= {(c, t, p) for c, t, p, _ in self.causes}
        busy |= {(c, t, p) for (c, _), lost in self.lost.items() for t, p in lost}
        busy |= {(x.cluster, i.topic, i.partition) for x in requests for i in x.request.partitions}
        loud = set()
        for x in due:
            if isinstance(x, BrokerRegistration):
                continue
            key = (x.cluster, x.topic, x.partition)
            if key in busy or not _quiet(x):
                loud.add(key)
        out: list[Decision | PartitionHealth | BrokerRegistration] = []
        epochs: dict[tuple[str, int], PartitionHealth] = {}  # the first quiet health of each higher epoch
        for x in due:
            if isinstance(x, BrokerRegistration) or (x.cluster, x.topic, x.partition) in loud:
                out.append(x)
            elif isinstance(x, PartitionHealth):
                known = self.controller.get(x.cluster)
                if known is None or x.controller_epoch > known:
                    first = epochs.setdefault((x.cluster, x.controller_epoch), x)
                    if (x.ts, x.topic, x.partition) < (first.ts, first.topic, first.partition):  # `_order`'s
                        epochs[(x.cluster, x.controller_epoch)] = x
        return out + list(epochs.values())

    def _snapshot(self, incident: Incident) -> Incident:
        """A copy of the incident as it stands, with its derived fields (worst, counts, summary) filled in."""
        i = _copy(incident, Incident)
        i.partition_count = len(i.partitions)
        worst = [p.worst for p in i.partitions if p.worst is not None]
        i.worst = max(worst, key=HEALTH_RANK.__getitem__) if worst else None
        i.under_min_isr_ms = _union_ms(
            [
                (s.start_ms, self.now.get(i.cluster, s.start_ms) if s.end_ms is None else s.end_ms)
                for p in i.partitions
                for s in p.intervals
                if s.state is Health.UNDER_MIN_ISR
            ]
        )
        i.summary = summary(i)
        return i

    # -- ordered inputs

    def _take_decision(self, d: Decision) -> None:
        """A decision: why its replicas leave an ISR (the cause a later health change is judged by), a marker, and a
        line of every incident it concerns."""
        key = (d.cluster, d.topic, d.partition)
        removed = sorted(set(d.isr_before) - set(d.isr_after))
        added = sorted(set(d.isr_after) - set(d.isr_before))
        if d.kind in (DecisionKind.SHRINK, DecisionKind.EXPAND):
            self.proposed.setdefault(key, {}).update((r, d) for r in removed or added)
        else:
            self._superseded(key, d)
        if d.kind is DecisionKind.SHRINK:
            for r in removed:
                self.causes[(*key, r)] = d
            self._mark(d.cluster, d.ts, "shrink", removed[0] if removed else None, d.topic, d.partition, _text(d))
        elif d.kind is DecisionKind.EXPAND:
            for r in added:
                self.causes.pop((*key, r), None)
            self._mark(d.cluster, d.ts, "expand", added[0] if added else None, d.topic, d.partition, _text(d))
        else:  # the controller's state: its removals are the controller's, unless it commits the leader's shrink
            for r in removed:
                cause = self.causes.get((*key, r))
                if cause is None or cause.kind is not DecisionKind.SHRINK or cause.leader != d.leader:
                    self.causes[(*key, r)] = d
            for r in d.isr_after:
                self.causes.pop((*key, r), None)
        concerned = set(removed) | set(added)
        for i in self._holding(key):
            if concerned & set(i.brokers):
                self._add_decision(i, d)

    def _take_state(self, h: PartitionHealth) -> None:
        """A partition's health: the counts, the brokers' lanes, the intervals of the incidents holding it, and the
        rules that open or join one on it."""
        key = (h.cluster, h.topic, h.partition)
        before = self.health.get(key)
        self._count(h.cluster, before, h)
        self._lanes(before, h)
        if h.health is Health.OK:
            self.health.pop(key, None)
        else:
            self.health[key] = h
        for i in self._holding(key):
            self._partition_state(i, key, h)
        self._commits(key, before, h)
        missing = _missing(h) - _missing(before)
        for rule in RULES:
            rule(self, h, missing)

    # -- the leaders' ISR changes, counted when they commit

    def _commits(self, key: PartitionKey, before: PartitionHealth | None, h: PartitionHealth) -> None:
        """A leader's shrink or expand counts when the committed ISR it changes does (`isrwatch_isr_shrinks_total`,
        `isrwatch_isr_expands_total`): in ZooKeeper mode when the leader writes it, with AlterPartition when the
        controller's commit applies: Kafka marks IsrShrinksPerSec / IsrExpandsPerSec only there
        (handleAlterPartitionUpdate's markIsrShrink / markIsrExpand on a success, Partition@3.9.0-rc3 L1972-1980;
        an error marks FailedIsrUpdatesPerSec). A proposal the controller refused never counts."""
        held = self.proposed.get(key)
        if not held or h.health is Health.OFFLINE:
            return
        gone, back = _missing(h) - _missing(before), _missing(before) - _missing(h)
        for r, d in sorted(held.items()):
            if r in (gone if d.kind is DecisionKind.SHRINK else back):
                del held[r]
                reason = d.reasons.get(str(r), ShrinkReason.STUCK) if d.kind is DecisionKind.SHRINK else None
                self._committed.append(IsrCommitted(h.cluster, d.kind, d.leader, r, reason))
        if not held:
            del self.proposed[key]

    def _superseded(self, key: PartitionKey, d: Decision) -> None:
        """The controller's state of a partition ends its leader's proposals, but those it commits: a shrink of the
        same leader that it leaves out of the ISR, an expand it keeps in (KRaft's metadata path applies a commit
        before the answer does, Partition@3.9.0-rc3 L980-1005); new metadata drops a pending change (L1004)."""
        held = self.proposed.get(key)
        if not held:
            return
        for r, p in list(held.items()):
            if p.leader != d.leader or (r in d.isr_after) is (p.kind is DecisionKind.SHRINK):
                del held[r]
        if not held:
            del self.proposed[key]

    def _refused(self, request: AlterPartitionRequest) -> None:
        """The proposals a request's answers refused for good: reverted (OPERATION_NOT_ATTEMPTED, INELIGIBLE_REPLICA)
        or left pending until new metadata (FENCED_LEADER_EPOCH and the like; Partition@3.9.0-rc3 L1892-1944). Those
        answered with a retriable or top-level error go again and may still commit."""
        for item in request.partitions:
            held = self.proposed.get((request.cluster, item.topic, item.partition))
            if not held or item.error not in REVERTING_ERRORS | STUCK_ERRORS:
                continue
            for r, p in list(held.items()):  # those made before the answer (a later one is a new proposal)
                if p.leader == request.broker and p.kind is item.kind and p.ts <= (item.answered_ms or 0):
                    del held[r]
            if not held:
                del self.proposed[(request.cluster, item.topic, item.partition)]

    # -- incidents

    def _holding(self, key: PartitionKey) -> list[Incident]:
        """The open incidents `key` is in (the order they took it in: each is changed on its own)."""
        return [self.open[ident] for ident in self._parts.get(key, ())]

    def find(self, cluster: str, kinds: Iterable[IncidentKind], broker: int | None) -> Incident | None:
        """The open incident of `kinds` about `broker` (None: of the cluster)."""
        kinds = tuple(kinds)
        for i in self.open.values():
            if i.cluster == cluster and i.kind in kinds and (broker is None or broker in i.brokers):
                return i
        return None

    def open_incident(self, cluster: str, kind: IncidentKind, brokers: list[int], at: int) -> Incident:
        ident = hashlib.sha256(f"{cluster}\0{kind}\0{brokers}\0{at}".encode()).hexdigest()[:16]
        incident = Incident(
            id=f"{kind}-{ident}", cluster=cluster, kind=kind, brokers=brokers, opened_ms=at, last_ms=at, quiet_ms=at
        )
        self.open[incident.id] = incident
        self._opened.append(incident.id)
        self._changed[incident.id] = incident
        if kind is IncidentKind.OFFLINE:
            incident.offline_ms = at
            for b in brokers:
                self._interval(cluster, b, "offline", at, None, 0)
        return incident

    def join(self, i: Incident, key: PartitionKey, at: int, decision: Decision | None = None) -> None:
        """`key` joins incident `i` at `at` (with the decision that made it): its state from now is the incident's."""
        i.last_ms = max(i.last_ms, at)
        i.quiet_ms = max(i.quiet_ms, at)
        self._changed[i.id] = i
        if decision is not None:
            if decision.leader is not None and decision.leader >= 0 and decision.leader not in i.leaders:
                i.leaders = sorted([*i.leaders, decision.leader])
            self._add_decision(i, decision)
        _, topic, partition = key
        parts = self._parts.setdefault(key, {})
        if i.id in parts:
            return
        part = parts[i.id] = IncidentPartition(topic=topic, partition=partition)
        i.partitions.append(part)
        h = self.health.get(key)
        if h is not None:
            part.worst = h.health
            part.intervals.append(StateInterval(state=h.health, start_ms=at))
        if i.offline_ms is not None:
            for b in i.brokers:
                self._interval(i.cluster, b, "offline", i.offline_ms, None, len(i.partitions))

    def _add_decision(self, i: Incident, d: Decision) -> None:
        if any(x == d for x in i.decisions):
            return
        i.decision_count += 1
        if len(i.decisions) < MAX_DECISIONS:
            i.decisions.append(d)
        self._changed[i.id] = i

    def _partition_state(self, i: Incident, key: PartitionKey, h: PartitionHealth) -> None:
        part = self._parts[key][i.id]
        last = part.intervals[-1] if part.intervals and part.intervals[-1].end_ms is None else None
        if last is not None and last.state is h.health:
            return
        if last is not None:
            last.end_ms = h.ts
        if h.health is not Health.OK:
            part.intervals.append(StateInterval(state=h.health, start_ms=h.ts))
            if part.worst is None or HEALTH_RANK[h.health] > HEALTH_RANK[part.worst]:
                part.worst = h.health
        else:
            i.quiet_ms = max(i.quiet_ms, h.ts)
        self._changed[i.id] = i

    def _close_due(self, cluster: str, at: int) -> None:
        for i in [i for i in self.open.values() if i.cluster == cluster and closes(self, i, at)]:
            i.closed_ms = i.quiet_ms
            del self.open[i.id]
            for p in i.partitions:
                key = (cluster, p.topic, p.partition)
                del self._parts[key][i.id]
                if not self._parts[key]:
                    del self._parts[key]
            self._changed[i.id] = i
            if i.offline_ms is not None:
                for b in i.brokers:
                    self._interval(cluster, b, "offline", i.offline_ms, i.quiet_ms, len(i.partitions))

    # -- the timeline

    def _mark(
        self, cluster: str, ts: int, kind: str, broker: int | None, topic: str | None, partition: int | None, text: str
    ) -> None:
        self._timeline.markers.append(
            Marker(cluster=cluster, ts=ts, kind=kind, broker=broker, topic=topic, partition=partition, text=text)
        )

    def _interval(self, cluster: str, broker: int, kind: str, start: int, end: int | None, partitions: int) -> None:
        """Open, widen or end a broker's interval of `kind` that started at `start`."""
        key = (cluster, broker, kind)
        current = self.intervals.get(key)
        if current is None or current.start_ms != start:
            current = BrokerInterval(cluster=cluster, broker=broker, kind=kind, start_ms=start, partitions=partitions)
        current.partitions = max(current.partitions, partitions)
        current.end_ms = end
        if end is None:
            self.intervals[key] = current
        else:
            self.intervals.pop(key, None)
        self._touched[(cluster, broker, kind, start)] = current

    def _count(self, cluster: str, before: PartitionHealth | None, after: PartitionHealth) -> None:
        counts = self.counts.setdefault(cluster, [0, 0, 0])
        was = list(counts)
        for h, sign in ((before, -1), (after, 1)):
            if h is None:
                continue
            if h.health is Health.OFFLINE:
                counts[2] += sign
            elif h.health is not Health.OK:
                counts[0] += sign
                counts[1] += sign * (h.health is Health.UNDER_MIN_ISR)
        if counts != was:
            self._points[(cluster, after.ts)] = CountPoint(
                cluster=cluster, ts=after.ts, under_replicated=counts[0], under_min_isr=counts[1], offline=counts[2]
            )

    def _lanes(self, before: PartitionHealth | None, h: PartitionHealth) -> None:
        """The brokers' out-of-sync and leading-fewer lanes, as this partition's state changes them."""
        key = (h.topic, h.partition)
        was, now = _out_of_sync(before), _out_of_sync(h)
        for b in sorted(was ^ now):
            n = self.out_of_sync.get((h.cluster, b), 0) + (1 if b in now else -1)
            current = self.intervals.get((h.cluster, b, "out_of_sync"))
            start = h.ts if current is None else current.start_ms
            self._interval(h.cluster, b, "out_of_sync", start, None if n > 0 else h.ts, max(n, 0))
            if n > 0:
                self.out_of_sync[(h.cluster, b)] = n
            else:
                self.out_of_sync.pop((h.cluster, b), None)
        moved = h.leader_before is not None and h.leader_before >= 0 and h.leader_before != h.leader
        changes = []
        if moved and h.leader_before in h.replicas:
            changes.append((h.leader_before, True))
        for (cluster, b), lost in self.lost.items():
            if cluster == h.cluster and key in lost and (b == h.leader or b not in h.replicas):
                changes.append((b, False))
        for b, loses in changes:
            lost = self.lost.setdefault((h.cluster, b), set())
            size = len(lost)
            (lost.add if loses else lost.discard)(key)
            if len(lost) == size:
                continue
            current = self.intervals.get((h.cluster, b, "leading_fewer"))
            start = h.ts if current is None else current.start_ms
            self._interval(h.cluster, b, "leading_fewer", start, None if lost else h.ts, len(lost))
            if not lost:
                del self.lost[(h.cluster, b)]


# -- the rules, numbered: each opens or joins its kind (SPEC §8); `closes` closes them all.


def follower_removed(book: IncidentBook, h: PartitionHealth, missing: set[int]) -> None:
    """Rule 1, `stuck` / `slow`: a partition's committed ISR lost a follower its leader shrank out (Kafka's
    Partition.maybeShrinkIsr, Partition@3.9.0-rc3 L1238-1262: out of sync as stuck or slow, getOutOfSyncReplicas
    L1300-1320). It joins the leader's own open stuck or slow incident (a stalled leader shrinks its followers when
    it resumes: lastCaughtUpTimeMs is stale on its clock), else that broker's open stuck, slow or offline incident
    (shrinks on many leaders are one incident), else opens one. A proposal the controller refused commits nothing:
    it opens nothing."""
    key = (h.cluster, h.topic, h.partition)
    for r in sorted(missing):
        cause = book.causes.get((*key, r))
        if cause is None or cause.kind is not DecisionKind.SHRINK or h.health is Health.OFFLINE:
            continue
        reason = cause.reasons.get(str(r), ShrinkReason.STUCK)
        # A leader that was itself stalled judges its followers on its stale clock when it resumes: its stall's.
        stalled = None if cause.leader is None else book.find(h.cluster, FOLLOWER_KINDS, cause.leader)
        i = (
            stalled
            or book.find(h.cluster, (*FOLLOWER_KINDS, IncidentKind.OFFLINE), r)
            or book.open_incident(h.cluster, IncidentKind(reason), [r], h.ts)
        )
        i.counts = {**i.counts, str(reason): i.counts.get(str(reason), 0) + 1}
        book.join(i, key, h.ts, cause)


def broker_offline(book: IncidentBook, h: PartitionHealth, missing: set[int]) -> None:
    """Rule 2, `offline`: the controller removed a broker from a partition's ISR or leadership (a LeaderAndIsr or
    KRaft metadata change it did not propose: ReplicationControlManager@4.4 handleBrokerFenced /
    handleBrokerUnregistered; KafkaController@3.9 onBrokerFailure), or the partition lost its leader (offline: its
    last leader is the broker). It joins that broker's open incident (a stuck or slow one becomes `offline`: it
    stopped fetching, then the controller removed it), else opens one."""
    key = (h.cluster, h.topic, h.partition)
    for r in sorted(missing):
        cause = book.causes.get((*key, r))
        by_controller = cause is not None and cause.kind is DecisionKind.LEADER_AND_ISR
        if not by_controller and h.health is not Health.OFFLINE:
            continue
        i = book.find(h.cluster, (*FOLLOWER_KINDS, IncidentKind.OFFLINE), r)
        if i is None:
            i = book.open_incident(h.cluster, IncidentKind.OFFLINE, [r], h.ts)
        elif i.kind is not IncidentKind.OFFLINE:  # it stopped fetching, then the controller removed it
            i.kind, i.offline_ms = IncidentKind.OFFLINE, h.ts
            book._interval(i.cluster, r, "offline", h.ts, None, 0)
        book.join(i, key, h.ts, cause)


def broker_fenced(book: IncidentBook, r: BrokerRegistration) -> None:
    """Rule 2b, `offline`: the controller fenced a broker it had unfenced (its registration, KRaft: a session that
    expired, ClusterControlManager@4.4 / BrokerHeartbeatManager): it joins the broker's open stuck, slow or offline
    incident (which becomes `offline`), else opens one, and holds it open until unfenced. The brokers report each
    registration as their metadata has it: a broker counts as fenced while most of those that reported it say so.
    A broker fenced when first seen (starting up) opens none."""
    key = (r.cluster, r.id)
    known = key in book.fenced
    reports, was = book.fenced.get(key, ({}, False))
    reports = {**reports, -1 if r.broker is None else r.broker: r.fenced}
    votes = sum(reports.values())
    now = was if votes * 2 == len(reports) else votes * 2 > len(reports)
    book.fenced[key] = (reports, now)
    if now == was:
        return
    if not now:
        current = book.intervals.get((r.cluster, r.id, "fenced"))
        if current is not None:
            book._interval(r.cluster, r.id, "fenced", current.start_ms, r.ts, 0)
        for held in book.open.values():
            if held.cluster == r.cluster and r.id in held.held:
                held.held = [b for b in held.held if b != r.id]
                held.last_ms, held.quiet_ms = max(held.last_ms, r.ts), max(held.quiet_ms, r.ts)
                book._changed[held.id] = held
        return
    book._interval(r.cluster, r.id, "fenced", r.ts, None, 0)
    if not known:
        return
    i = book.find(r.cluster, (*FOLLOWER_KINDS, IncidentKind.OFFLINE), r.id)
    if i is None:
        i = book.open_incident(r.cluster, IncidentKind.OFFLINE, [r.id], r.ts)
    elif i.kind is not IncidentKind.OFFLINE:
        i.kind, i.offline_ms = IncidentKind.OFFLINE, r.ts
        book._interval(i.cluster, r.id, "offline", r.ts, None, len(i.partitions))
    i.held = sorted({*i.held, r.id})
    i.last_ms = max(i.last_ms, r.ts)
    book._changed[i.id] = i


def controller_change(book: IncidentBook, h: PartitionHealth, missing: set[int]) -> None:
    """Rule 3, `controller`: a partition state from a controller epoch above any seen in its cluster (a new
    controller: KafkaController@3.9 onControllerFailover increments it) opens one; partitions that state leaves
    short of their full ISR within `incident_window_ms` join it. A cluster's first epoch, or a partition's first
    state, opens none."""
    known = book.controller.get(h.cluster)
    if known is None or h.controller_epoch > known:
        book.controller[h.cluster] = h.controller_epoch
        if known is not None and h.leader_before is not None:
            opened = book.open_incident(h.cluster, IncidentKind.CONTROLLER, [], h.ts)
            opened.controller_epoch = h.controller_epoch
            text = f"controller epoch {known} -> {h.controller_epoch}"
            book._mark(h.cluster, h.ts, "controller", None, None, None, text)
    if h.health is Health.OK or h.leader_before is None:
        return
    i = book.find(h.cluster, (IncidentKind.CONTROLLER,), None)
    if i is not None and i.controller_epoch == h.controller_epoch and h.ts <= i.last_ms + book.window:
        book.join(i, (h.cluster, h.topic, h.partition), h.ts)


def isr_change_pending(book: IncidentBook, x: _Request) -> None:
    """Rule 4, `isr_change_pending`: a broker's AlterPartition request in flight `isr_change_pending_ms` or longer
    (DefaultAlterPartitionManager@4.4 sends one at a time: while it waits, every ISR change of the broker waits). It
    opens then, joins the broker's open one, and is pending until the request is answered."""
    r = x.request
    if x.answered:
        i = book.find(r.cluster, (IncidentKind.ISR_CHANGE_PENDING,), r.broker)
        if x.ts - r.sent_ms >= TIMELINE_MIN_INTERVAL_MS:
            book._interval(r.cluster, r.broker, "alter_partition_in_flight", r.sent_ms, x.ts, len(r.partitions))
        queued = min((item.submitted_ms for item in r.partitions), default=r.sent_ms)
        if r.sent_ms - queued >= TIMELINE_MIN_INTERVAL_MS:
            book._interval(r.cluster, r.broker, "alter_partition_queue", queued, r.sent_ms, len(r.partitions))
        if i is not None and r.sent_ms in i.pending:
            i.pending = [t for t in i.pending if t != r.sent_ms]
            i.last_ms, i.quiet_ms = max(i.last_ms, x.ts), max(i.quiet_ms, x.ts)
            book._changed[i.id] = i
        return
    i = book.find(r.cluster, (IncidentKind.ISR_CHANGE_PENDING,), r.broker)
    if i is None:
        i = book.open_incident(r.cluster, IncidentKind.ISR_CHANGE_PENDING, [r.broker], x.ts)
        i.leaders = [r.broker]
    i.pending = sorted({*i.pending, r.sent_ms})
    for item in r.partitions:
        book.join(i, (r.cluster, item.topic, item.partition), x.ts)


def divergence(book: IncidentBook, d: Divergence) -> None:
    """Rule 5, `divergence`: the audit found the model and a broker disagreeing on the rules, not on timing (SPEC §7).
    It joins the broker's open divergence incident, else opens one."""
    i = book.find(d.cluster, (IncidentKind.DIVERGENCE,), d.broker) or book.open_incident(
        d.cluster, IncidentKind.DIVERGENCE, [d.broker], d.ts
    )
    i.counts = {**i.counts, str(d.kind): i.counts.get(str(d.kind), 0) + 1}
    book._changed[i.id] = i
    if d.topic is not None and d.partition is not None:
        book.join(i, (d.cluster, d.topic, d.partition), max(d.ts, i.opened_ms))
    else:
        i.last_ms, i.quiet_ms = max(i.last_ms, d.ts), max(i.quiet_ms, d.ts)
    book._mark(d.cluster, d.ts, "divergence", d.broker, d.topic, d.partition, f"{d.kind} ({d.subject})")


def closes(book: IncidentBook, i: Incident, at: int) -> bool:
    """Every kind closes alike: at `at`, each partition it touched is back to its full ISR, none of its requests is in
    flight, none of its brokers is fenced, and nothing joined it for `incident_window_ms` (a shrink within it would be
    the same incident)."""
    if i.pending or i.held or at < i.last_ms + book.window:
        return False
    return not any((i.cluster, p.topic, p.partition) in book.health for p in i.partitions)


# The rules a partition's health runs, in order (rules 4 and 5 run on the step's requests and divergences).
RULES = (follower_removed, broker_offline, controller_change)


def merge_incidents(before: Iterable[Incident], changed: Iterable[Incident]) -> list[Incident]:
    """Incidents as they stand after `changed`: each one's latest version, in (opened_ms, id) order."""
    merged = {i.id: i for i in before}
    merged.update((i.id, i) for i in changed)
    return sorted(merged.values(), key=lambda i: (i.opened_ms, i.id))


# -- words


def summary(i: Incident) -> str:
    """One line a person reads: who, what, how many partitions, how bad, how long."""
    n = i.partition_count
    parts = f"{n} partition{'s' if n != 1 else ''}"
    who = ", ".join(map(str, i.brokers))
    leaders = ", ".join(map(str, i.leaders))
    if i.kind in FOLLOWER_KINDS:
        reasons = " and ".join(f"{k}" for k in sorted(i.counts)) or str(i.kind)
        verb = "stopped fetching" if i.kind is IncidentKind.STUCK else "fell behind"
        head = f"broker {who} {verb}: removed as {reasons} from {parts} by leader{'s' if len(i.leaders) > 1 else ''} "
        head += leaders or "?"
    elif i.kind is IncidentKind.OFFLINE:
        head = f"broker {who} offline: the controller removed it from the ISR or leadership of {parts}"
        if i.counts:
            head = f"broker {who} stopped fetching, then went offline: removed from the ISR or leadership of {parts}"
    elif i.kind is IncidentKind.CONTROLLER:
        short = f"{parts} left short of their full ISR" if n else "no partition left short of its full ISR"
        head = f"controller change (epoch {i.controller_epoch}): {short}"
    elif i.kind is IncidentKind.ISR_CHANGE_PENDING:
        head = f"broker {who}'s AlterPartition request stuck in flight, holding the ISR changes of {parts}"
    else:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(i.counts.items()))
        head = f"the model and broker {who} disagree ({kinds}) on {parts}"
    return f"{head}; {_min_isr_words(i)}; {_duration_words(i)}"


def _min_isr_words(i: Incident) -> str:
    offline = sum(1 for p in i.partitions if p.worst is Health.OFFLINE)
    under = sum(1 for p in i.partitions if p.worst is Health.UNDER_MIN_ISR)
    words = []
    if under:
        words.append(
            f"{under} under min ISR for {_seconds(i.under_min_isr_ms)}"
            " (producers with acks=all got NOT_ENOUGH_REPLICAS)"
        )
    else:
        words.append("none under min ISR")
    if offline:
        words.append(f"{offline} offline")
    return ", ".join(words)


def _duration_words(i: Incident) -> str:
    if i.closed_ms is None:
        return "not over yet"
    return f"back after {_seconds(i.closed_ms - i.opened_ms)}"


def _seconds(ms: int) -> str:
    return f"{ms / 1000:.3g} s" if ms < 10_000 else f"{round(ms / 1000)} s"


def _text(d: Decision) -> str:
    changed = ", ".join(f"{r} ({d.reasons[str(r)]})" if str(r) in d.reasons else str(r) for r in d.replicas_changed)
    return f"leader {d.leader} {d.kind} {changed}: ISR {d.isr_before} -> {d.isr_after}"


def _propagation_text(p: Propagation) -> str:
    return f"broker {p.broker} propagated {len(p.partitions)} ISR change(s) ({p.trigger})"


# -- helpers


def _order(x: _Ordered) -> tuple[int, int, str, str, int, int]:
    """Event time; a decision, a registration, the health a decision leads to, a request; then the partition or broker
    (a registration: its reporter): the same in every cut."""
    if isinstance(x, _Request):
        return (x.ts, 3 + x.answered, x.cluster, "", x.request.broker, 0)
    if isinstance(x, BrokerRegistration):
        return (x.ts, 1, x.cluster, "", x.id, -1 if x.broker is None else x.broker)
    return (x.ts, 0 if isinstance(x, Decision) else 2, x.cluster, x.topic, x.partition, 0)


def _quiet(x: Decision | PartitionHealth) -> bool:
    """An input that leaves a partition the book holds nothing of as it was (`IncidentBook._without_quiet`): a
    LeaderAndIsr that removes no replica, a health at the full ISR whose leader did not move."""
    if isinstance(x, Decision):
        return x.kind is DecisionKind.LEADER_AND_ISR and set(x.isr_before) <= set(x.isr_after)
    moved = x.leader_before is not None and x.leader_before >= 0 and x.leader_before != x.leader
    return x.health is Health.OK and not moved


def _missing(h: PartitionHealth | None) -> set[int]:
    """The brokers a partition's state leaves out: its replicas out of the ISR, or, offline, its last leader."""
    if h is None or h.health is Health.OK:
        return set()
    if h.health is Health.OFFLINE:
        return {h.leader_before} if h.leader_before is not None and h.leader_before >= 0 else set()
    return set(h.replicas) - set(h.isr)


def _out_of_sync(h: PartitionHealth | None) -> set[int]:
    """The followers out of a led partition's ISR."""
    if h is None or h.health in (Health.OK, Health.OFFLINE):
        return set()
    return set(h.replicas) - set(h.isr)


def _union_ms(spans: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for s, e in sorted(spans):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def _copy(value: object, kind: type[T]) -> T:
    """A deep copy of a struct: the book keeps changing its own."""
    return msgspec.msgpack.decode(_encode(value), type=kind)
