"""The `applyInPandasWithState` function: one bucket of partitions per state key, each cluster in its own time.

Each call parses the lines the key received (with the replay's validator, so a line that is not an event never
moves anything), learns from the valid ones how far each cluster's event time has come (`newest`) and how far each
broker's own stream has (its watermarks), and applies every cluster's events and scheduled checks up to that
cluster's frontier (`frontier_of`: where the slowest broker's stream has passed, or `newest -
allowed_lateness_ms`), in (ts, seq) order, and each partition further, up to where the streams of the brokers
acting on it have passed (`ahead_of`); later events wait, compressed. An event at or behind its cluster's frontier
(or its partition's, `BucketState.ahead`) when it arrives is late; one dated more than `max_future_ms` after it
arrived is refused: neither changes anything, each is a dead letter with its reason. One more than `max_future_ms`
ahead of its cluster's time waits for a witness before it moves that time (`Jumps`).
Whatever the micro-batch cut, the reports add up to the outputs of one pass (SPEC §6).

No Spark watermark or timeout is needed: a key's time moves only with the lines it receives, its
own events, the ticks every key receives and the beacons (see `framing`). Each report says how far
the key has applied each cluster it can still change; the sink settles propagation up to the
smallest of those (`sink.Frontiers`).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from itertools import chain
from typing import TYPE_CHECKING, NamedTuple

import pandas as pd

from isrwatch.state.audit import Audit
from isrwatch.state.clock import ClockBook
from isrwatch.state.config import Config
from isrwatch.state.engine import PartitionEngine
from isrwatch.state.events import (
    AlterPartitionSent,
    BrokerRegistration,
    DeadLetter,
    Event,
    Fetch,
    IsrChangePropagated,
    LeaderAndIsr,
    PartitionEvent,
    Tick,
    Watermark,
    in_future,
    parse_event,
    sorts_at,
    uncorroborated,
    witnesses,
)
from isrwatch.state.frontier import behind_partition, cluster_frontier, partition_frontier, streams_passed
from isrwatch.state.partition import Outputs, PartitionKey, follower_copy, recorded
from isrwatch.state.records import row_due, shown
from isrwatch.state.schedule import INF

from .buckets import CONTROL_KEY
from .framing import Role, unpack
from .reports import (
    BUCKET_STATE_VERSION,
    SLICES_PER_LATENESS,
    BucketState,
    Chunk,
    IsrDivergence,
    Jump,
    Report,
    decode_bucket,
    encode,
)

if TYPE_CHECKING:
    from pyspark.sql.streaming.state import GroupState

StateFunction = Callable[[tuple, Iterator[pd.DataFrame], "GroupState"], Iterator[pd.DataFrame]]
UNREADABLE = "the stream could not read its type, ts, topic or partition (isrwatch.streaming.framing)"


def _lines(frames: Iterator[pd.DataFrame]) -> Iterator[tuple[bytes, int, int, int, int | None]]:
    """(raw, seq, arrival, role, received) of every line the key received, from the framer's packed rows."""
    for frame in frames:
        for data in frame["data"]:
            yield from unpack(data).lines()


_SPREAD = frozenset((Tick, BrokerRegistration, AlterPartitionSent, Watermark))
_NAMING = (Watermark, LeaderAndIsr, BrokerRegistration)  # what tells a key of its cluster's brokers (`Jumps.learn`)


def count_events(events: list[Event], first: bool) -> tuple[int, int]:
    """How many events (a tick, registration or AlterPartition request only in the first bucket: every bucket gets
    it) and their latest time: the latest they sort at (an isr-expiration tick at its run's end), where a finite
    input ends, as the one-pass replay ends there."""
    ticks = 0 if first else sum(map(_SPREAD.__contains__, map(type, events)))  # map: this runs once per event
    return len(events) - ticks, max(map(sorts_at, events), default=-1)


def _late(ev: Event, raw: bytes, frontier: int, lateness: int, partition: bool = False) -> DeadLetter:
    where = (
        f"where its partition was applied past its cluster's frontier ({frontier}): the brokers acting on the "
        "partition had passed it"
        if partition
        else f"its cluster's frontier {frontier} (allowed_lateness_ms {lateness}, or its brokers' watermarks)"
    )
    return DeadLetter(raw=raw.decode("utf-8", "replace"), field="ts", ts=ev.ts, reason=f"late: at or behind {where}")


def _partition_bound(ev: Event, ahead: dict[tuple[str, int], int]) -> int | None:
    """Where `ev`'s partition was applied past its cluster's frontier, if `ev` is late for it
    (`frontier.behind_partition`); a follower's copy of its state never is."""
    if not isinstance(ev, PartitionEvent) or (type(ev) is LeaderAndIsr and follower_copy(ev)):
        return None
    at = ahead.get((ev.topic, ev.partition))
    return at if behind_partition(sorts_at(ev), at) else None


def frontier_of(held: BucketState, cluster: str, config: Config) -> int:
    """How far the key may apply `cluster` (`frontier.cluster_frontier`), never back from where it applied."""
    rule = cluster_frontier(
        held.newest[cluster],
        config.allowed_lateness_ms,
        config.broker_rejoin_margin_ms,
        held.watermarks.get(cluster),
        held.brokers.get(cluster, ()),
        held.named.get(cluster, ()),
        cluster in held.unbounded,
    )
    return max(rule, held.applied.get(cluster, rule))


class Ahead(NamedTuple):
    """How far past its cluster's frontier a key may apply each partition (SPEC §6, `frontier.partition_frontier`):
    `of(acting)` a partition's own frontier given the brokers acting on it (`PartitionEngine.acting_brokers`), `limit`
    the furthest any can go (the most advanced broker's stream)."""

    of: Callable[[frozenset[int]], int]
    limit: int


def ahead_of(held: BucketState, cluster: str, config: Config, frontier: int) -> Ahead | None:
    """The partitions' own frontiers, when the brokers' streams set the cluster's (`frontier.streams_passed`) and one
    is past it; None: the cluster's frontier is every partition's."""
    passed = streams_passed(held.watermarks.get(cluster), held.brokers.get(cluster, ()), cluster in held.unbounded)
    if passed is None or max(passed.values()) <= frontier:
        return None
    fallback, margin = held.newest[cluster] - config.allowed_lateness_ms, config.broker_rejoin_margin_ms
    known: dict[frozenset[int], int] = {}

    def of(acting: frozenset[int]) -> int:
        f = known.get(acting)
        if f is None:
            f = known[acting] = partition_frontier(acting, passed, fallback, margin, frontier)
        return f

    return Ahead(of, max(passed.values()))


def _emit(report: Report) -> Iterator[pd.DataFrame]:
    yield pd.DataFrame({"bucket": [report.bucket], "report": [encode(report)]})


def _control(frames: Iterator[pd.DataFrame], until: int | None) -> Iterator[pd.DataFrame]:
    """Lines without a usable time or key: dead letters (or, replaying, valid events after --until)."""
    report = Report(CONTROL_KEY)
    clocks = ClockBook()
    for raw, seq, arrival, _, received in _lines(frames):
        ev = parse_event(raw, seq, arrival)
        if type(ev) is DeadLetter:
            report.dead.append(ev)
        elif until is not None and ev.ts > until:
            report.after_until += 1
            if ev.broker is not None:  # its broker's clock, as a replay parsing every line sees it
                clocks.observe(ev.cluster, ev.broker, ev.ts, received)
        else:
            report.dead.append(DeadLetter(raw=raw.decode("utf-8", "replace"), reason=UNREADABLE, ts=ev.ts))
    report.clocks = clocks.samples()
    return _emit(report)


def classify(
    lines: Iterable[tuple[bytes, int, int, int, int | None]],
    held: BucketState,
    config: Config,
    first: bool,
    report: Report,
) -> tuple[dict[str, list[Event]], dict[str, list[Behind]]]:
    """Parse each line the key received: a valid, timely one moves its cluster's time (`held.newest`) and, unless a
    beacon, arrives; one that jumps more than `max_future` ahead of that time waits for corroboration (`Jumps`);
    a broker's fetch behind the frontier may be a caught-up repeat the engine still takes (`Behind`); the others are
    dead letters, reported where the line is counted (its own event; a tick in the first bucket). Every valid event
    a broker reported, refused, waiting or not, shows its clock (`report.clocks`). Returns the arrived events and
    the fetches behind the frontier, by cluster."""
    newest, lateness, max_future = held.newest, config.allowed_lateness_ms, config.max_future_ms
    # A line is late against what earlier calls knew (a batch arrives as a whole): at or behind these.
    late_at = {cluster: frontier_of(held, cluster, config) for cluster in newest}
    ahead = {cluster: {(t, p): at for t, p, at in applied} for cluster, applied in held.ahead.items() if applied}
    arrived: dict[str, list[Event]] = defaultdict(list)
    behind: dict[str, list[Behind]] = defaultdict(list)
    jumps = Jumps(held, max_future, first, arrived, report)
    fresh: dict[str, list[tuple[Event, bytes, int]]] = defaultdict(list)  # clusters this key has no time of yet
    witnessed, lowest, unbounded = held.brokers, jumps.lowest, held.unbounded
    event, tick, beacon = int(Role.EVENT), int(Role.TICK), int(Role.BEACON)  # ints: compared once per line
    clocks = ClockBook()
    observe = clocks.observe
    for raw, seq, arrival, role, received in lines:
        ev = parse_event(raw, seq, arrival)
        if type(ev) is DeadLetter:
            dead = ev
        else:
            cluster = ev.cluster
            if ev.broker is not None:
                observe(cluster, ev.broker, ev.ts, received)
            dead = None if received is None else in_future(ev, raw, received, max_future)
            if dead is None:
                bound = late_at.get(cluster)
                if bound is None and cluster not in newest:
                    fresh[cluster].append((ev, raw, role))
                    continue
                partition_bound = None
                if bound is None or ev.ts > bound:
                    known = newest[cluster]
                    if ev.ts > known + max_future:
                        jumps.judge(ev, raw, role)
                        continue
                    mine = ahead.get(cluster)
                    partition_bound = None if mine is None else _partition_bound(ev, mine)
                    if partition_bound is None:
                        # Jumps.take, inline: this runs once per line
                        if ev.ts > known:
                            newest[cluster] = ev.ts
                        if role != beacon:
                            arrived[cluster].append(ev)
                        broker = ev.broker
                        if broker is None:
                            if cluster not in unbounded:
                                unbounded.add(cluster)
                        elif broker not in witnessed.get(cluster, ()):
                            jumps.witness(cluster, broker)
                        if type(ev) in _NAMING:
                            jumps.learn(ev)
                        if lowest and lowest.get(cluster, INF) <= newest[cluster] + max_future:
                            jumps.release(cluster)
                        continue
                    bound = partition_bound
                if type(ev) is Fetch and role == event and ev.broker is not None:
                    behind[cluster].append(Behind(ev, raw, bound, partition_bound is not None))
                    continue
                dead = _late(ev, raw, bound, lateness, partition_bound is not None)
        if role == event or (role == tick and first):  # a line counts where it is counted
            report.dead.append(dead)
    for cluster, admitted in fresh.items():
        # A cluster's time starts at the earliest line of the first batch that brings it, not at whichever line
        # comes first: a lone line far ahead in that batch is a jump like any other.
        newest[cluster] = min(ev.ts for ev, _, _ in admitted)
        for ev, raw, role in admitted:
            if ev.ts > newest[cluster] + max_future:
                jumps.judge(ev, raw, role)
            else:
                jumps.take(ev, role)
                if lowest.get(cluster, INF) <= newest[cluster] + max_future:
                    jumps.release(cluster)
    jumps.expire()
    report.clocks = clocks.samples()
    return arrived, behind


class Behind(NamedTuple):
    """A broker's fetch that arrived at or behind its cluster's frontier (`bound`): applied if it is a caught-up repeat
    (`PartitionEngine.take_caught_up_repeat`), else late."""

    event: Fetch
    raw: bytes
    bound: int
    partition: bool = False  # behind where its partition was applied past its cluster's frontier


class Jumps:
    """The key's lines that jumped more than `max_future_ms` ahead of their cluster's time (SPEC §6): a lone event far
    ahead of everything else its cluster has seen cannot move that time by itself. Each waits until another event
    within `max_future_ms` of it is its witness (`events.witnesses`) or its cluster's time comes within
    `max_future_ms` of it, and then arrives; if its cluster's time moves `max_future_ms` on without either, it is
    refused (`events.uncorroborated`).

    A broker a year ahead keeps up to `max_future_ms` of its lines waiting, so nothing here scans them per line:
    `lowest` (per cluster, the earliest waiting time) tells a taken line whether any comes within reach (a taken line
    is never ahead of its cluster's time, so what it witnesses is within reach of that time anyway), and a jumping
    line looks for a witness by bisection in the waiting times of each reporter (`_times`)."""

    def __init__(
        self, held: BucketState, max_future: int, first: bool, arrived: dict[str, list[Event]], report: Report
    ) -> None:
        self.held, self.max_future, self.first, self.arrived, self.report = held, max_future, first, arrived, report
        self.beacon = int(Role.BEACON)
        self.lowest: dict[str, int] = {}
        for jump in held.jumps:
            cluster = jump.event.cluster
            self.lowest[cluster] = min(self.lowest.get(cluster, INF), jump.event.ts)
        self._index: dict[tuple[str, int | None], list[int]] | None = None

    def witness(self, cluster: str, broker: int) -> None:
        """Remember a reporting broker this key took an event of: a broker's jump needs another broker's witness."""
        brokers = self.held.brokers.get(cluster)
        if brokers is None:
            self.held.brokers[cluster] = {broker}
        elif broker not in brokers:
            brokers.add(broker)

    def _times(self) -> dict[tuple[str, int | None], list[int]]:
        """The waiting jumps' times, sorted, per (cluster, reporting broker)."""
        if self._index is None:
            self._index = {}
            for jump in self.held.jumps:
                self._index.setdefault((jump.event.cluster, jump.event.broker), []).append(jump.event.ts)
            for times in self._index.values():
                times.sort()
        return self._index

    def judge(self, ev: Event, raw: bytes, role: int) -> None:
        """A line that jumps: it arrives, with what it witnesses, when a waiting jump is its witness; else it waits."""
        cluster, mf, broker = ev.cluster, self.max_future, ev.broker
        lone = self.held.brokers.get(cluster, set()) <= {broker}
        for (c, other), times in self._times().items():
            if c == cluster and witnesses(broker, other, lone):
                at = bisect_left(times, ev.ts - mf)
                if at < len(times) and times[at] <= ev.ts + mf:
                    self.take(ev, role)
                    self.release(cluster)
                    return
        self.held.jumps.append(Jump(self.held.newest[cluster], role, raw, ev))
        insort(self._times().setdefault((cluster, broker), []), ev.ts)
        self.lowest[cluster] = min(self.lowest.get(cluster, INF), ev.ts)

    def release(self, cluster: str) -> None:
        """Every waiting jump of `cluster` its time now comes within `max_future_ms` of arrives, earliest first (each
        may bring the next within reach)."""
        newest, mf = self.held.newest, self.max_future
        mine = sorted((j for j in self.held.jumps if j.event.cluster == cluster), key=lambda j: j.event.ts)
        taken = 0
        for jump in mine:
            if jump.event.ts > newest[cluster] + mf:
                break
            self.take(jump.event, jump.role)
            taken += 1
        if taken:
            gone = {id(j) for j in mine[:taken]}
            self.held.jumps = [j for j in self.held.jumps if id(j) not in gone]
            self._index = None
        if taken < len(mine):
            self.lowest[cluster] = mine[taken].event.ts
        else:
            self.lowest.pop(cluster, None)

    def take(self, ev: Event, role: int) -> None:
        """`ev` arrives (a beacon only moves its cluster's time); `classify` does the same inline for each line."""
        newest = self.held.newest
        newest[ev.cluster] = max(newest[ev.cluster], ev.ts)
        if role != self.beacon:
            self.arrived[ev.cluster].append(ev)
        if ev.broker is None:
            self.held.unbounded.add(ev.cluster)
        else:
            self.witness(ev.cluster, ev.broker)
        if type(ev) in _NAMING:
            self.learn(ev)

    def learn(self, ev: Watermark | LeaderAndIsr | BrokerRegistration) -> None:
        """What an arrived event tells of its cluster's brokers (`frontier.cluster_frontier`): a watermark, how far
        its broker's stream has come; a partition state or registration, brokers the cluster has."""
        held, cluster = self.held, ev.cluster
        if type(ev) is Watermark:
            marks = held.watermarks.setdefault(cluster, {})
            if ev.ts > marks.get(ev.broker, -INF):
                marks[ev.broker] = ev.ts
            return
        named = held.named.setdefault(cluster, set())
        if type(ev) is BrokerRegistration:
            named.add(ev.id)
        elif type(ev) is LeaderAndIsr:
            named.update(ev.replicas)

    def expire(self) -> None:
        """Refuse the jumps whose cluster's time moved `max_future_ms` on since they came, with nothing corroborating
        them: a dead letter where the line is counted."""
        mf, newest = self.max_future, self.held.newest
        keep = []
        for jump in self.held.jumps:
            if newest[jump.event.cluster] < jump.base + mf:
                keep.append(jump)
            elif jump.role == int(Role.EVENT) or (jump.role == int(Role.TICK) and self.first):
                self.report.dead.append(uncorroborated(jump.raw, jump.event.ts, jump.base, mf))
        self.held.jumps = keep


def split_due(
    held: BucketState, cluster: str, fresh: list[Event], frontier: int, reach: int, width: int
) -> tuple[list[Event] | None, list[Chunk]]:
    """The cluster's held chunks and fresh events split at `reach` (its frontier, or how far its partitions may go
    past it: `Ahead.limit`): the events the engine takes (before it; None when the frontier has not moved past what
    the engine applied and no partition may go past it, so nothing runs) and the chunks still pending, held in
    slices `width` ms wide (`Chunk.slices`). A chunk that starts at or after `reach` passes through without being
    decompressed; only one that `reach` cuts is decoded and held again."""
    mine = [c for c in held.pending if c.cluster == cluster]
    if reach <= held.applied.get(cluster, -INF):  # nothing due: pass the cluster through untouched
        return None, mine + Chunk.slices(cluster, fresh, width)
    due: list[Event] = []
    rest: list[Event] = []
    pending: list[Chunk] = []
    for chunk in mine:
        if chunk.first >= reach:
            pending.append(chunk)
        elif chunk.last < reach:
            due += chunk.events()
        else:
            _cut(chunk.events(), reach, due, rest)
    _cut(fresh, reach, due, rest)
    pending += Chunk.slices(cluster, rest, width)
    return due, pending


def _cut(events: list[Event], reach: int, due: list[Event], rest: list[Event]) -> None:
    """Add the events before `reach` to `due`, the others to `rest`."""
    for ev in events:
        if ev.ts < reach:
            due.append(ev)
        else:
            rest.append(ev)


def run_engine(
    config: Config,
    held: BucketState,
    cluster: str,
    due: list[Event],
    frontier: int,
    first: bool,
    behind: list[Behind],
    ahead: Ahead | None,
) -> tuple[PartitionEngine, Outputs, list[Fetch], list[Behind], dict[PartitionKey, int]]:
    """Apply the fetches behind the frontier that are caught-up repeats (before anything of this call: each comes
    before its partition's next event), then, with the one scheduler (`PartitionEngine.advance`), the cluster's due
    events and scheduled checks up to its frontier and each partition's own events and its leader's ticks up to its
    own frontier (`ahead`); the engine goes back into `held` once `absorb` has marked the rows it writes. Returns the
    fetches behind the frontier it took, those it refused (late), and where each partition applied past the frontier
    is exact."""
    engine = PartitionEngine(config, held.engines.get(cluster), owns_ticks=first)
    out = Outputs()
    taken: list[Fetch] = []
    refused: list[Behind] = []
    for b in behind:
        if engine.take_caught_up_repeat(b.event, out):
            taken.append(b.event)
        else:
            refused.append(b)
    engine.add(due)
    engine.advance(frontier, out, ahead)
    applied, exact = out.ahead, out.exact
    bounds = {(t, p): at for t, p, at in held.ahead.get(cluster, ()) if at >= frontier}
    bounds.update({(t, p): at for (_, t, p), at in applied.items()})
    held.ahead[cluster] = [(t, p, at) for (t, p), at in bounds.items()]
    held.applied[cluster] = frontier
    if engine.partitions:
        held.holding.add(cluster)
    return engine, out, taken, refused, exact


def absorb(
    report: Report,
    engine: PartitionEngine,
    out: Outputs,
    due: list[Event],
    frontier: int,
    exact: dict[PartitionKey, int],
    config: Config,
) -> None:
    """Add what the engine produced to the report: the records of the partitions the due events or the outputs
    touched whose rows are due (`records.row_due`: exact at the frontier, or where a partition applied past it is:
    `exact`), each marked as shown in its partition, the decisions, ISR changes, ticks, observations and counters
    (the model's ISR writes and resyncs stay in the key, which audits them: `audit_own`)."""
    changed = {(ev.cluster, ev.topic, ev.partition) for ev in due if isinstance(ev, PartitionEvent)} | out.touched
    partitions, lag_ms, refresh_ms = engine.partitions, config.replica_lag_time_max_ms, config.partition_refresh_ms
    for k in sorted(changed):
        p = partitions.get(k)
        if p is None:
            continue
        record = engine.record(p)
        now = shown(record, exact.get(k, frontier), lag_ms)
        if row_due(p.shown, now, refresh_ms):
            p.shown = now
            report.records.append(record)
            report.as_of.append(now.at)
    report.decisions.extend(out.decisions)
    report.changes.extend(out.changes)
    report.ticks.extend(out.ticks)
    report.observed.extend(recorded(out.observed, engine.owns_ticks))
    report.alter_partition.extend(out.alter_partition)
    report.states.extend(out.states)
    report.registrations.extend(out.registrations)
    counters = report.counters
    for name, n in out.counters.items():
        counters[name] = counters.get(name, 0) + n


def audit_own(report: Report, audit: Audit | None, config: Config, out: Outputs, until: dict[str, int]) -> Audit | None:
    """The audit of the key's own partitions (SPEC §7, `Audit.pair`): their ISR writes paired and judged here, up to
    the key's frontier; the report carries the divergences, and what the driver's batch verdicts need (`Report.marks`,
    `Report.audited`). None: nothing to audit yet."""
    if audit is None:
        if not (out.writes or out.resyncs or any(type(o) is not IsrChangePropagated for o in out.observed)):
            return None
        audit = Audit(config)
    divergences, marks = audit.pair(out.writes, out.observed, out.resyncs, until)
    report.divergences += map(IsrDivergence.of, divergences)
    report.marks += marks
    report.audited += audit.new_brokers
    audit.new_brokers.clear()
    return audit


def state_function(
    config: Config, bucket_ids: list[int], until: int | None = None, keep_blobs: bool = False
) -> StateFunction:
    """The function for `applyInPandasWithState`; `keep_blobs` adds each bucket's state to its report."""

    def step(key: tuple, frames: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
        bucket = int(key[0])
        if bucket == CONTROL_KEY:
            return _control(frames, until)
        first = bucket == bucket_ids[0]
        held = decode_bucket(state.get[0]) if state.exists else BucketState(BUCKET_STATE_VERSION)
        report = Report(bucket)
        arrived, behind = classify(_lines(frames), held, config, first, report)
        report.events, report.max_ts = count_events(list(chain.from_iterable(arrived.values())), first)
        if first:
            held.ticked |= {ev.cluster for evs in arrived.values() for ev in evs if type(ev) is Tick}
        pending: list[Chunk] = []
        audit = None if held.audit is None else Audit(config, held.audit)
        width = max(1, config.allowed_lateness_ms // SLICES_PER_LATENESS)
        for cluster in held.newest:
            frontier = frontier_of(held, cluster, config)
            fresh = arrived.get(cluster, [])
            if cluster in held.watermarks:  # a watermark changes no state: the engine never sees one
                fresh = [ev for ev in fresh if type(ev) is not Watermark]
            ahead = ahead_of(held, cluster, config, frontier)
            reach = frontier if ahead is None else ahead.limit
            due, rest = split_due(held, cluster, fresh, frontier, reach, width)
            pending += rest
            late = behind.get(cluster, [])
            if due is not None or late:
                engine, out, taken, refused, exact = run_engine(
                    config, held, cluster, due or [], frontier, first, late, ahead
                )
                lateness = config.allowed_lateness_ms
                report.dead += [_late(b.event, b.raw, b.bound, lateness, b.partition) for b in refused]
                report.events += len(taken)
                report.max_ts = max([report.max_ts, *(ev.ts for ev in taken)])
                absorb(report, engine, out, [*(due or []), *taken], frontier, exact, config)
                audit = audit_own(report, audit, config, out, {cluster: frontier})
                held.engines[cluster] = engine.to_bytes()
        held.pending = pending
        held.audit = None if audit is None or audit.is_empty() else audit.to_bytes()
        # What this key may still change: clusters it holds partitions or pending events of, and (the first
        # key) those whose propagation ticks it passes on. The sink settles no cluster beyond these.
        for cluster in held.holding | held.ticked | {c.cluster for c in pending}:
            report.frontiers[cluster] = held.applied.get(cluster, -INF)
        blob = encode(held)
        if keep_blobs:
            report.blob = blob
        state.update((blob,))
        return _emit(report)

    return step
