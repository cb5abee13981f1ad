"""One-pass replay: JSONL lines in, SPEC §5 outputs out, through the same engine the stream runs."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from .config import Config
from .engine import PartitionEngine
from .events import DeadLetter, Event, parse_event
from .propagation import PropagationBook
from .records import partition_record

Progress = Callable[[str], None]


@dataclass
class ReplayResult:
    decisions: list[dict] = field(default_factory=list)
    propagations: list[dict] = field(default_factory=list)
    states: list[dict] = field(default_factory=list)
    brokers: list[dict] = field(default_factory=list)
    dead_letters: list[dict] = field(default_factory=list)
    summary: dict = field(default_factory=dict)


def parse_lines(sources: Iterable[Iterable[bytes | str]], progress: Progress | None = None,
                every: int = 500_000) -> tuple[list[Event], list[DeadLetter], int]:
    """Parse every non-blank line; a missing `seq` is the line's number in its file (1-based)."""
    events: list[Event] = []
    dead: list[DeadLetter] = []
    arrival = 0
    for lines in sources:
        for line_no, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            arrival += 1
            # The raw text a dead letter keeps is the line without its ending, as the stream frames it.
            parsed = parse_event(line.rstrip(b"\r\n" if isinstance(line, bytes) else "\r\n"), line_no, arrival)
            if type(parsed) is DeadLetter:
                dead.append(parsed)
            else:
                events.append(parsed)
            if progress and arrival % every == 0:
                progress(f"parsed {arrival:,} lines ({len(dead):,} dead letters)")
    return events, dead, arrival


def replay_events(events: list[Event], config: Config, until: int | None = None) -> ReplayResult:
    """Apply `events` and every scheduled check up to `until` inclusive (default: the last event time)."""
    started = time.perf_counter()
    if until is None:
        until = max((ev.ts for ev in events), default=-1)
    engine = PartitionEngine(config)
    engine.add(events)
    out = engine.advance(until + 1)
    book = PropagationBook(config)
    book.add([*out.changes, *out.ticks])
    propagations = book.advance(until + 1)
    elapsed = time.perf_counter() - started
    result = ReplayResult(
        decisions=out.decisions,
        propagations=propagations,
        states=[partition_record(p, config) for p in sorted(engine.partitions.values(), key=lambda p: p.key)],
        brokers=book.brokers_view(),
    )
    result.summary = {
        "events": len(events),
        "events_after_until": len(engine.buffer),
        "until": until,
        "decisions": len(out.decisions),
        "decisions_by_kind": dict(sorted(Counter(d["kind"] for d in out.decisions).items())),
        "shrinks_by_reason": dict(sorted(Counter(r for d in out.decisions for r in d["reasons"].values()).items())),
        "propagations": len(propagations),
        "propagations_by_trigger": dict(sorted(Counter(p["trigger"] for p in propagations).items())),
        "partitions": len(engine.partitions),
        "ignored_fetches_by_reason": dict(sorted(out.ignored_fetches.items())),
        "ignored_appends_by_reason": dict(sorted(out.ignored_appends.items())),
        "engine_seconds": round(elapsed, 3),
        "partitions_pending_propagation": sum(len(b.pending) for b in book.brokers.values()),
    }
    return result


def replay(sources: Iterable[Iterable[bytes | str]], config: Config, until: int | None = None,
           progress: Progress | None = None) -> ReplayResult:
    """Parse and replay; the summary adds dead letters by reason and the end-to-end rate."""
    started = time.perf_counter()
    events, dead, lines = parse_lines(sources, progress)
    if progress:
        progress(f"parsed {lines:,} lines: {len(events):,} events, {len(dead):,} dead letters; applying")
    result = replay_events(events, config, until)
    result.dead_letters = [d.to_record() for d in dead]
    elapsed = time.perf_counter() - started
    result.summary.update({
        "lines": lines,
        "dead_letters": len(dead),
        "dead_letters_by_reason": dict(sorted(Counter(d.category for d in dead).items())),
        "seconds": round(elapsed, 3),
        "events_per_second": round(lines / elapsed) if elapsed > 0 else None,
        "config": config.to_dict(),
    })
    return result
