"""The stream's event-time policy at one state key (SPEC §6): which lines arrive, and how far the engine applies.

A state key receives lines in micro-batches, in no order Kafka promises. `classify` parses each one (with the
replay's validator, so a line that is not an event never moves anything), learns from the valid ones how far each
cluster's event time has come (`Held.newest`) and how far each broker's own stream has (its watermarks), and sorts
them: an event at or behind its cluster's frontier (`frontier_of`), or its partition's (`Held.ahead`), when it
arrives is late; one dated more than `max_future_ms` after it arrived is refused: neither changes anything, each is
a dead letter with its reason. One more than `max_future_ms` ahead of its cluster's time waits for a witness before
it moves that time (`Jumps`); a broker whose clock the others outvote moves no time and holds nothing back
(`outvoted`). The engine then takes every cluster's events up to its frontier, and each partition's
further, up to where the streams of the brokers acting on it have passed (`ahead_of`); later events wait
(`split_due`). Whatever the micro-batch cut, what the key applies adds up to one pass over the same lines.

Pure: the Spark shell (`streaming.stateful`) keeps the state (`Held`) and the held events' compression.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable
from enum import IntEnum
from typing import NamedTuple, Protocol, TypeVar

from msgspec import Struct

from .clock import ClockBook, ClockSample
from .config import Config
from .events import (
    BrokerRegistration,
    DeadLetter,
    Event,
    Fetch,
    LeaderAndIsr,
    PartitionEvent,
    Watermark,
    in_future,
    parse_event,
    sorts_at,
    uncorroborated,
    witnesses,
)
from .frontier import behind_partition, cluster_frontier, partition_frontier, stall_bound, streams_passed
from .partition import follower_copy
from .schedule import INF


class Role(IntEnum):
    """What a routed line is to the state key that receives it."""

    EVENT = 0  # its own partition event (or a control line)
    TICK = 1  # a tick: every key applies it, the first key alone counts it
    BEACON = 2  # another key's event: it only tells how far its cluster's time has come


class Jump(Struct, array_like=True):
    """A valid line dated more than max_future_ms ahead of its cluster's time: it waits for corroboration (SPEC §6)."""

    base: int  # the cluster's time when it came: nothing corroborating it by base + max_future_ms, it is refused
    role: int  # the line's `Role` here: it arrives, or (a beacon) only carries its time
    raw: bytes  # for its dead letter
    event: Event


class Held(Protocol):
    """What a state key keeps of its clusters' event time between calls (the shell's bucket state)."""

    newest: dict[str, int]  # cluster -> its time: the newest valid, corroborated event time this key has seen
    applied: dict[str, int]  # cluster -> how far its engine has applied (exclusive)
    jumps: list[Jump]  # lines waiting for corroboration, in arrival order
    brokers: dict[str, set[int]]  # cluster -> the reporting brokers whose events this key has taken
    watermarks: dict[str, dict[int, int]]  # cluster -> broker -> its newest watermark this key has taken
    named: dict[str, set[int]]  # cluster -> the brokers its partition states and registrations here name
    unbounded: set[str]  # clusters this key has taken an event without a broker of
    ahead: dict[str, list[tuple[str, int, int]]]  # cluster -> (topic, partition, last applied past its frontier)
    clocks: list[ClockSample]  # the reporting brokers' clocks as this key saw them: whose the others outvote


Line = tuple[bytes, int, int, int, "int | None"]  # (raw, seq, arrival, role, received) of one line a key received
_NAMING = (Watermark, LeaderAndIsr, BrokerRegistration)  # what tells a key of its cluster's brokers (`Jumps.learn`)


def late(ev: Event, raw: bytes, frontier: int, lateness: int, partition: bool = False) -> DeadLetter:
    """The dead letter of an event at or behind its cluster's `frontier` (or, `partition`, its partition's)."""
    where = (
        f"where its partition was applied past its cluster's frontier ({frontier}): the brokers acting on the "
        "partition had passed it"
        if partition
        else f"its cluster's frontier {frontier} (allowed_lateness_ms {lateness}, or its brokers' watermarks)"
    )
    return DeadLetter(raw=raw.decode("utf-8", "replace"), field="ts", ts=ev.ts, reason=f"late: at or behind {where}")


def partition_bound_of(ev: Event, ahead: dict[tuple[str, int], int]) -> int | None:
    """Where `ev`'s partition was applied past its cluster's frontier, if `ev` is late for it
    (`frontier.behind_partition`); a follower's copy of its state never is."""
    if not isinstance(ev, PartitionEvent) or (type(ev) is LeaderAndIsr and follower_copy(ev)):
        return None
    at = ahead.get((ev.topic, ev.partition))
    return at if behind_partition(sorts_at(ev), at) else None


def outvoted(held: Held, config: Config) -> dict[str, set[int]]:
    """Per cluster, the brokers whose clock the others outvote, as this key saw them (`clock.outvoted`)."""
    found: dict[str, set[int]] = {}
    if len(held.clocks) > 2:
        book = ClockBook()
        book.merge(held.clocks)
        for cluster, broker in book.outvoted(config.max_future_ms):
            found.setdefault(cluster, set()).add(broker)
    return found


def _streams(held: Held, cluster: str, skewed: Collection[int]) -> tuple[dict[int, int] | None, set[int]]:
    """The cluster's brokers' watermarks and reporters, but an outvoted clock's: it holds nothing back."""
    marks, reporters = held.watermarks.get(cluster), held.brokers.get(cluster, set())
    if skewed:
        marks = None if marks is None else {b: w for b, w in marks.items() if b not in skewed}
        reporters = reporters - set(skewed)
    return marks, reporters


def frontier_of(held: Held, cluster: str, config: Config, skewed: Collection[int] = ()) -> int:
    """How far the key may apply `cluster` (`frontier.cluster_frontier`), never back from where it applied. The
    brokers whose clock is outvoted (`skewed`) hold nothing back; they stay named, so their return keeps the margin."""
    marks, reporters = _streams(held, cluster, skewed)
    rule = cluster_frontier(
        held.newest[cluster],
        config.allowed_lateness_ms,
        config.broker_stall_wait_ms,
        config.broker_rejoin_margin_ms,
        marks,
        reporters,
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


def ahead_of(held: Held, cluster: str, config: Config, frontier: int, skewed: Collection[int] = ()) -> Ahead | None:
    """The partitions' own frontiers, when the brokers' streams set the cluster's (`frontier.streams_passed`) and one
    is past it; None: the cluster's frontier is every partition's. An outvoted clock (`skewed`) holds none back."""
    passed = streams_passed(*_streams(held, cluster, skewed), cluster in held.unbounded)
    if passed is None or max(passed.values()) <= frontier:
        return None
    newest, lateness, margin = held.newest[cluster], config.allowed_lateness_ms, config.broker_rejoin_margin_ms
    fallback, gone = newest - lateness, stall_bound(newest, lateness, config.broker_stall_wait_ms)
    known: dict[frozenset[int], int] = {}

    def of(acting: frozenset[int]) -> int:
        f = known.get(acting)
        if f is None:
            f = known[acting] = partition_frontier(acting, passed, fallback, gone, margin, frontier)
        return f

    return Ahead(of, max(passed.values()))


def classify(lines: Iterable[Line], held: Held, config: Config, first: bool, refused: list[DeadLetter]) -> Classified:
    """Parse each line the key received: a valid, timely one moves its cluster's time (`held.newest`) and, unless a
    beacon, arrives; one that jumps more than `max_future` ahead of that time waits for corroboration (`Jumps`);
    a broker's fetch behind the frontier may be a caught-up repeat the engine still takes (`Behind`); the others are
    dead letters, added to `refused` where the line is counted (its own event; a tick in the first key). Every valid
    event a broker reported, refused, waiting or not, shows its clock (`Classified.clocks`); those of a broker the
    others outvote (`outvoted`, over every line of the call before any is judged) move no time and witness nothing."""
    newest, lateness, max_future = held.newest, config.allowed_lateness_ms, config.max_future_ms
    parsed = [(parse_event(raw, seq, arrival), raw, role, received) for raw, seq, arrival, role, received in lines]
    clocks = ClockBook()
    observe = clocks.observe
    for ev, _, _, received in parsed:
        if not isinstance(ev, DeadLetter) and ev.broker is not None:
            observe(ev.cluster, ev.broker, ev.ts, received)
    samples = clocks.samples()
    clocks.merge(held.clocks)
    held.clocks = clocks.samples()
    skewed = outvoted(held, config)
    # A line is late against what earlier calls knew (a batch arrives as a whole): at or behind these.
    late_at = {cluster: frontier_of(held, cluster, config, skewed.get(cluster, ())) for cluster in newest}
    ahead = {cluster: {(t, p): at for t, p, at in applied} for cluster, applied in held.ahead.items() if applied}
    arrived: dict[str, list[Event]] = defaultdict(list)
    behind: dict[str, list[Behind]] = defaultdict(list)
    jumps = Jumps(held, max_future, first, arrived, refused, skewed)
    fresh: dict[str, list[tuple[Event, bytes, int]]] = defaultdict(list)  # clusters this key has no time of yet
    witnessed, lowest, unbounded = held.brokers, jumps.lowest, held.unbounded
    event, tick, beacon = int(Role.EVENT), int(Role.TICK), int(Role.BEACON)  # ints: compared once per line
    for ev, raw, role, received in parsed:
        dead: DeadLetter | None
        if isinstance(ev, DeadLetter):
            dead = ev
        else:
            cluster = ev.cluster
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
                    partition_bound = None if mine is None else partition_bound_of(ev, mine)
                    if partition_bound is None:
                        # Jumps.take, inline: this runs once per line
                        if ev.ts > known and not (skewed and ev.broker in skewed.get(cluster, ())):
                            newest[cluster] = ev.ts
                        if role != beacon:
                            arrived[cluster].append(ev)
                        broker = ev.broker
                        if broker is None:
                            if cluster not in unbounded:
                                unbounded.add(cluster)
                        elif broker not in witnessed.get(cluster, ()):
                            jumps.witness(cluster, broker)
                        if isinstance(ev, _NAMING):
                            jumps.learn(ev)
                        if lowest and lowest.get(cluster, INF) <= newest[cluster] + max_future:
                            jumps.release(cluster)
                        continue
                    bound = partition_bound
                if type(ev) is Fetch and role == event and ev.broker is not None:
                    behind[cluster].append(Behind(ev, raw, bound, partition_bound is not None))
                    continue
                if type(ev) is Watermark:
                    continue  # behind the frontier it promises what the frontier already holds: no data, no letter
                dead = late(ev, raw, bound, lateness, partition_bound is not None)
        if role == event or (role == tick and first):  # a line counts where it is counted
            refused.append(dead)
    for cluster, admitted in fresh.items():
        # A cluster's time starts at the earliest line of the first batch that brings it, not at whichever line
        # comes first: a lone line far ahead in that batch is a jump like any other. An outvoted clock sets it not.
        off = skewed.get(cluster, ())
        starts = [ev.ts for ev, _, _ in admitted if ev.broker not in off] or [ev.ts for ev, _, _ in admitted]
        newest[cluster] = min(starts)
        for ev, raw, role in admitted:
            if ev.ts > newest[cluster] + max_future:
                jumps.judge(ev, raw, role)
            else:
                jumps.take(ev, role)
                if lowest.get(cluster, INF) <= newest[cluster] + max_future:
                    jumps.release(cluster)
    jumps.expire()
    return Classified(arrived, behind, samples)


class Classified(NamedTuple):
    """What `classify` made of a call's lines, by cluster: the events that arrived, the broker's fetches that came at or
    behind the frontier (`Behind`), and the reporting brokers' clocks as the lines showed them (SPEC §6)."""

    arrived: dict[str, list[Event]]
    behind: dict[str, list[Behind]]
    clocks: list[ClockSample]


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
        self,
        held: Held,
        max_future: int,
        first: bool,
        arrived: dict[str, list[Event]],
        refused: list[DeadLetter],
        skewed: dict[str, set[int]],
    ) -> None:
        self.held, self.max_future, self.first, self.arrived, self.refused = held, max_future, first, arrived, refused
        self.skewed = skewed  # per cluster, the brokers whose clock is outvoted: they move no time and witness nothing
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
        skewed = self.skewed.get(cluster, ())
        for (c, other), times in self._times().items():
            if c == cluster and other not in skewed and witnesses(broker, other, lone):
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
        if ev.broker not in self.skewed.get(ev.cluster, ()):
            newest[ev.cluster] = max(newest[ev.cluster], ev.ts)
        if role != self.beacon:
            self.arrived[ev.cluster].append(ev)
        if ev.broker is None:
            self.held.unbounded.add(ev.cluster)
        else:
            self.witness(ev.cluster, ev.broker)
        if isinstance(ev, _NAMING):
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
                self.refused.append(uncorroborated(jump.raw, jump.event.ts, jump.base, mf))
        self.held.jumps = keep


class Slice(Protocol):
    """Held events of one cluster, in one slice of event time (the shell keeps them compressed)."""

    first: int  # the earliest event time: nothing in it is due before it
    last: int  # the latest: all of it is due past it

    def events(self) -> list[Event]: ...


S = TypeVar("S", bound=Slice)


def split_due(
    held: list[S], applied: int, fresh: list[Event], reach: int, slices: Callable[[list[Event]], list[S]]
) -> tuple[list[Event] | None, list[S]]:
    """A cluster's held slices and fresh events split at `reach` (its frontier, or how far its partitions may go past
    it: `Ahead.limit`): the events the engine takes (before it; None when `reach` is not past what the engine
    `applied` and no partition may go past it, so nothing runs) and what stays held, in `slices`. A slice that starts
    at or after `reach` passes through whole; only one that `reach` cuts is read and held again."""
    if reach <= applied:  # nothing due: pass the cluster through untouched
        return None, held + slices(fresh)
    due: list[Event] = []
    rest: list[Event] = []
    pending: list[S] = []
    for chunk in held:
        if chunk.first >= reach:
            pending.append(chunk)
        elif chunk.last < reach:
            due += chunk.events()
        else:
            _cut(chunk.events(), reach, due, rest)
    _cut(fresh, reach, due, rest)
    pending += slices(rest)
    return due, pending


def _cut(events: list[Event], reach: int, due: list[Event], rest: list[Event]) -> None:
    """Add the events before `reach` to `due`, the others to `rest`."""
    for ev in events:
        if ev.ts < reach:
            due.append(ev)
        else:
            rest.append(ev)
