"""The `applyInPandasWithState` function: one bucket of partitions per state key, each cluster in its own time.

A shell over the core: each call reads the lines the key received from the framer's packed rows, lets the event-time
policy sort them (`state.eventtime.classify`: arrived, late, refused, waiting for a witness), and runs each cluster's
engine up to its frontier, and each partition up to its own (`frontier_of`, `ahead_of`); later events wait in
compressed slices (`reports.Chunk`). Whatever the micro-batch cut, the reports add up to the outputs of one pass
(SPEC §6).

No Spark watermark or timeout is needed: a key's time moves only with the lines it receives, its
own events, the ticks every key receives and the beacons (see `framing`). Each report says how far
the key has applied each cluster it can still change; the sink settles propagation up to the
smallest of those (`sink.Frontiers`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import chain
from typing import TYPE_CHECKING

import pandas as pd

from isrwatch.state import eventtime
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
    PartitionEvent,
    Tick,
    Watermark,
    parse_event,
    sorts_at,
)
from isrwatch.state.eventtime import Ahead, Behind, Line, ahead_of, classify, frontier_of, late, outvoted
from isrwatch.state.partition import Outputs, PartitionKey, recorded
from isrwatch.state.records import row_due, shown
from isrwatch.state.schedule import INF

from .buckets import CONTROL_KEY
from .framing import unpack
from .reports import (
    BUCKET_STATE_VERSION,
    SLICES_PER_LATENESS,
    BucketState,
    Chunk,
    IsrDivergence,
    Report,
    decode_bucket,
    encode,
)

if TYPE_CHECKING:
    from pyspark.sql.streaming.state import GroupState

StateFunction = Callable[[tuple, Iterator[pd.DataFrame], "GroupState"], Iterator[pd.DataFrame]]
UNREADABLE = "the stream could not read its type, ts, topic or partition (isrwatch.streaming.framing)"


def _lines(frames: Iterator[pd.DataFrame]) -> Iterator[Line]:
    """(raw, seq, arrival, role, received) of every line the key received, from the framer's packed rows."""
    for frame in frames:
        for data in frame["data"]:
            yield from unpack(data).lines()


_SPREAD = frozenset((Tick, BrokerRegistration, AlterPartitionSent, Watermark))


def count_events(events: list[Event], first: bool) -> tuple[int, int]:
    """How many events (a tick, registration or AlterPartition request only in the first bucket: every bucket gets
    it) and their latest time: the latest they sort at (an isr-expiration tick at its run's end), where a finite
    input ends, as the one-pass replay ends there."""
    ticks = 0 if first else sum(map(_SPREAD.__contains__, map(type, events)))  # map: this runs once per event
    return len(events) - ticks, max(map(sorts_at, events), default=-1)


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


def split_due(
    held: BucketState, cluster: str, fresh: list[Event], reach: int, width: int
) -> tuple[list[Event] | None, list[Chunk]]:
    """`eventtime.split_due` over the cluster's held chunks, holding what stays in slices `width` ms wide
    (`Chunk.slices`): a chunk `reach` does not cut passes through without being decompressed."""
    mine = [c for c in held.pending if c.cluster == cluster]
    return eventtime.split_due(
        mine, held.applied.get(cluster, -INF), fresh, reach, lambda events: Chunk.slices(cluster, events, width)
    )


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
        arrived, behind, report.clocks = classify(_lines(frames), held, config, first, report.dead)
        report.events, report.max_ts = count_events(list(chain.from_iterable(arrived.values())), first)
        if first:
            held.ticked |= {ev.cluster for evs in arrived.values() for ev in evs if type(ev) is Tick}
        pending: list[Chunk] = []
        audit = None if held.audit is None else Audit(config, held.audit)
        skewed = outvoted(held, config)
        width = max(1, config.allowed_lateness_ms // SLICES_PER_LATENESS)
        for cluster in held.newest:
            mine = skewed.get(cluster, ())
            frontier = frontier_of(held, cluster, config, mine)
            fresh = arrived.get(cluster, [])
            if cluster in held.watermarks:  # a watermark changes no state: the engine never sees one
                fresh = [ev for ev in fresh if type(ev) is not Watermark]
            ahead = ahead_of(held, cluster, config, frontier, mine)
            reach = frontier if ahead is None else ahead.limit
            due, rest = split_due(held, cluster, fresh, reach, width)
            pending += rest
            behind_frontier = behind.get(cluster, [])
            if due is not None or behind_frontier:
                engine, out, taken, refused, exact = run_engine(
                    config, held, cluster, due or [], frontier, first, behind_frontier, ahead
                )
                lateness = config.allowed_lateness_ms
                report.dead += [late(b.event, b.raw, b.bound, lateness, b.partition) for b in refused]
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
