"""One-pass replay: JSONL lines in, SPEC §5 outputs out, through the same engine and step the stream runs.

No clock is read here: a caller that wants the rates in the summary passes one in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .alter_partition import AlterPartitionBook
from .audit import Audit
from .clock import ClockBook
from .config import Config
from .engine import PartitionEngine
from .events import DeadLetter, Event, in_future, parse_event, sorts_at
from .incidents import IncidentBook
from .propagation import PropagationBook
from .step import Settled, settle, summarize

Progress = Callable[[str], None]
Clock = Callable[[], float]  # seconds, e.g. time.perf_counter


@dataclass
class ReplayResult(Settled):
    """A settled step over the whole input, with its summary (summary.json); `records` = every final state."""

    summary: dict[str, Any] = field(default_factory=dict)


def parse_lines(
    sources: Iterable[Iterable[bytes | str]],
    progress: Progress | None = None,
    every: int = 500_000,
    now: int | None = None,
    max_future_ms: int = 0,
    clocks: ClockBook | None = None,
) -> tuple[list[Event], list[DeadLetter], int]:
    """Parse every non-blank line; a missing `seq` is the line's number in its file (1-based).

    With `now` (epoch ms), every line counts as arriving then: an event dated more than `max_future_ms` after
    it is a `ts_in_future` dead letter, as in the stream. Without it the input is trusted. `clocks` observes
    every valid event a broker reported, refused or not: a refused one is the evidence of its clock.
    """
    events: list[Event] = []
    dead: list[DeadLetter] = []
    arrival = 0
    for lines in sources:
        for line_no, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            arrival += 1
            # The raw text a dead letter keeps is the line without its ending, as the stream frames it.
            text = line.rstrip(b"\r\n") if isinstance(line, bytes) else line.rstrip("\r\n")
            parsed = parse_event(text, line_no, arrival)
            if not isinstance(parsed, DeadLetter):
                if clocks is not None and parsed.broker is not None:
                    clocks.observe(parsed.cluster, parsed.broker, parsed.ts, now)
                if now is not None:
                    parsed = in_future(parsed, text, now, max_future_ms) or parsed
            if isinstance(parsed, DeadLetter):
                dead.append(parsed)
            else:
                events.append(parsed)
            if progress and arrival % every == 0:
                progress(f"parsed {arrival:,} lines ({len(dead):,} dead letters)")
    return events, dead, arrival


def replay_events(
    events: list[Event],
    config: Config,
    until: int | None = None,
    dead: Iterable[DeadLetter] = (),
    clock: Clock | None = None,
    clocks: ClockBook | None = None,
) -> ReplayResult:
    """Apply `events` and every scheduled check up to `until` inclusive (default: the last event time). `clocks`:
    the brokers' clocks as parsing observed them (default: observed from `events`, without arrival times)."""
    started = clock() if clock else 0.0
    if clocks is None:
        clocks = ClockBook()
        for ev in events:
            if ev.broker is not None:
                clocks.observe(ev.cluster, ev.broker, ev.ts, None)
    if until is None:
        until = max((sorts_at(ev) for ev in events), default=-1)
    engine = PartitionEngine(config)
    engine.add(events)
    book = PropagationBook(config)
    audit = Audit(config)
    incidents = IncidentBook(config)
    settled = settle(book, [engine.advance(until + 1)], until + 1, audit, AlterPartitionBook(), clocks, incidents)
    result = ReplayResult(
        decisions=settled.decisions,
        propagations=settled.propagations,
        alter_partitions=settled.alter_partitions,
        observed=settled.observed,
        divergences=settled.divergences,
        records=[engine.record(p) for p in sorted(engine.partitions.values(), key=lambda p: p.key)],
        brokers=settled.brokers,
        counters=settled.counters,
        watermark=settled.watermark,
        incidents=settled.incidents,
        opened=settled.opened,
        timeline=settled.timeline,
        committed=settled.committed,
    )
    result.add_dead_letters(dead)
    result.summary = {
        "events": len(events),
        "events_after_until": len(engine.buffer),
        "until": until,
        **summarize(result, len(engine.partitions), book, audit.pending()),
    }
    if clock:
        result.summary["engine_seconds"] = round(clock() - started, 3)
    return result


def replay(
    sources: Iterable[Iterable[bytes | str]],
    config: Config,
    until: int | None = None,
    progress: Progress | None = None,
    clock: Clock | None = None,
    now: int | None = None,
) -> ReplayResult:
    """Parse and replay; the summary adds the line count, the configuration and, given a clock, the rates.

    `now`: judge event times against it as the stream judges them against their arrival (`parse_lines`).
    """
    started = clock() if clock else 0.0
    clocks = ClockBook()
    events, dead, lines = parse_lines(sources, progress, now=now, max_future_ms=config.max_future_ms, clocks=clocks)
    if progress:
        progress(f"parsed {lines:,} lines: {len(events):,} events, {len(dead):,} dead letters; applying")
    result = replay_events(events, config, until, dead, clock, clocks)
    result.summary.update({"lines": lines, "config": config.to_dict()})
    if clock:
        elapsed = clock() - started
        result.summary["seconds"] = round(elapsed, 3)
        result.summary["events_per_second"] = round(lines / elapsed) if elapsed > 0 else None
    return result
