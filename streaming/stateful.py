"""The `applyInPandasWithState` function: one bucket of partitions per state key, advanced to the watermark.

Each call keeps the bucket's new lines pending, parses (with the replay's validator) and applies
those the watermark has passed — events and checks interleaved in (ts, seq) order — and reports
what that decided. Whatever the micro-batch cut, the reports add up to the same outputs (SPEC §6).
A key's event-time timeout is its next_due: its next pending line or the next isr-expiration
check that could remove a follower, the earliest moment advancing could change anything. The
first bucket also answers every watermark move (its timeout is never later than the watermark),
so the sink learns each new watermark and settles propagation up to it even in a batch where no
key has anything to do: a pending propagation batch goes out when no new change arrives.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pandas as pd

from state.config import Config
from state.engine import PartitionEngine
from state.events import DeadLetter, Tick, parse_event
from state.partition import partition_record
from state.schedule import INF

from .buckets import CONTROL_KEY
from .framing import MAX_STREAM_TS
from .reports import BUCKET_STATE_VERSION, BucketState, Chunk, Line, Report, decode_bucket, encode

if TYPE_CHECKING:
    from pyspark.sql.streaming.state import GroupState

StateFunction = Callable[[tuple, Iterator[pd.DataFrame], "GroupState"], Iterator[pd.DataFrame]]
UNREADABLE = "the stream could not read its type, ts, topic or partition (Spark from_json)"


def _rows(frames: Iterator[pd.DataFrame]) -> Iterator[Line]:
    for frame in frames:
        yield from map(
            Line,
            frame["ts"].tolist(),
            frame["seq"].tolist(),
            frame["arrival"].tolist(),
            frame["raw"].tolist(),
            frame["shared"].tolist(),
        )


def count_events(events: list, first: bool) -> tuple[int, int]:
    """How many events (a tick only in the first bucket: every bucket gets it) and their latest time."""
    ticks = sum(1 for ev in events if type(ev) is Tick)
    return len(events) - (0 if first else ticks), max((ev.ts for ev in events), default=-1)


def _late(line: Line, watermark: int, lateness: int) -> DeadLetter:
    """A line at or behind the watermark: counted as a dead letter (its parse error, if it has one)."""
    ev = parse_event(line.raw, line.seq, line.arrival)
    if type(ev) is DeadLetter:
        return ev
    return DeadLetter(
        raw=line.raw.decode("utf-8", "replace"),
        field="ts",
        ts=ev.ts,
        reason=f"late: at or behind the watermark {watermark} (allowed_lateness_ms {lateness})",
    )


def _emit(report: Report) -> Iterator[pd.DataFrame]:
    yield pd.DataFrame({"bucket": [report.bucket], "report": [encode(report)]})


def _control(frames: Iterator[pd.DataFrame], watermark: int, until: int | None) -> Iterator[pd.DataFrame]:
    """Lines without a usable time or key: dead letters (or, replaying, valid events after --until)."""
    report = Report(CONTROL_KEY, watermark)
    for line in _rows(frames):
        raw = line.raw
        ev = parse_event(raw, line.seq, line.arrival)
        if type(ev) is DeadLetter:
            report.dead.append(ev)
        elif until is not None and ev.ts > until:
            report.after_until += 1
        elif ev.ts > MAX_STREAM_TS:
            report.dead.append(
                DeadLetter(
                    raw=raw.decode("utf-8", "replace"),
                    field="ts",
                    reason=(f"Expected `int` <= {MAX_STREAM_TS} - at `$.ts` (the stream's event-time limit)"),
                )
            )
        else:
            report.dead.append(DeadLetter(raw=raw.decode("utf-8", "replace"), reason=UNREADABLE, ts=ev.ts))
    return _emit(report)


def state_function(
    config: Config, bucket_ids: list[int], until: int | None = None, keep_blobs: bool = False
) -> StateFunction:
    """The function for `applyInPandasWithState`; `keep_blobs` adds each bucket's state to its report."""
    first = bucket_ids[0]

    def step(key: tuple, frames: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
        bucket = int(key[0])
        watermark = state.getCurrentWatermarkMs()
        if bucket == CONTROL_KEY:
            return _control(frames, watermark, until)
        held = decode_bucket(state.get[0]) if state.exists else BucketState(BUCKET_STATE_VERSION)
        report = Report(bucket, watermark)

        def counts(line: Line) -> bool:
            """Whether this bucket reports the line: a tick's copy is reported by the first bucket only."""
            return bucket == first or not line.shared

        arrived = []
        for line in _rows(frames):
            if line.ts > watermark or watermark == 0:  # 0: no watermark yet
                arrived.append(line)
            elif counts(line):
                report.dead.append(_late(line, watermark, config.allowed_lateness_ms))
        if arrived:
            held.pending.append(Chunk.of(arrived))
        # Lines the watermark has passed are parsed and go into the engine, which applies exactly those.
        events = []
        keep: list[Chunk] = []
        rest: list[Line] = []
        for chunk in held.pending:
            if chunk.first >= watermark:
                keep.append(chunk)
                continue
            for line in chunk.lines():
                if line.ts >= watermark:
                    rest.append(line)
                    continue
                ev = parse_event(line.raw, line.seq, line.arrival)
                if type(ev) is not DeadLetter:
                    events.append(ev)
                elif counts(line):
                    report.dead.append(ev)
        if rest:
            keep.append(Chunk.of(rest))
        held.pending = keep
        report.events, report.max_ts = count_events(events, bucket == first)
        engine = PartitionEngine(config, held.engine, emit_propagation_ticks=bucket == first)
        report.late = engine.add(events)
        out = engine.advance(watermark)
        changed = {(ev.cluster, ev.topic, ev.partition) for ev in events if type(ev) is not Tick} | out.touched
        partitions = engine.partitions
        report.decisions = out.decisions
        report.changes = out.changes
        report.ticks = out.ticks
        report.records = [partition_record(partitions[k], config) for k in sorted(changed) if k in partitions]
        report.ignored_fetches = dict(out.ignored_fetches)
        report.ignored_appends = dict(out.ignored_appends)
        next_due = min(engine.next_due(), min((c.first for c in keep), default=INF))
        held.engine = engine.to_bytes()
        blob = encode(held)
        if keep_blobs:
            report.blob = blob
        state.update((blob,))
        timeout = min(next_due, watermark) if bucket == first else next_due
        if timeout < INF:
            state.setTimeoutTimestamp(max(timeout, 1))  # >= the watermark; Spark refuses 0
        return _emit(report)

    return step
