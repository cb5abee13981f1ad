"""A replay through the stream's shell: each micro-batch's reports settled and kept, then finished at --until.

`isrwatch replay --engine spark` feeds it from a real query; `streaming.testing.run_stateful` from the
state function called directly. When the input is drained, every bucket's final state is advanced to
--until + 1 with the same engine, and the propagation book likewise, exactly as the local replay ends
(SPEC §6): the result has the local replay's shape and summary keys.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from state.config import Config
from state.engine import PartitionEngine
from state.events import DeadLetter, Event, parse_event
from state.partition import partition_record
from state.propagation import PropagationBook
from state.replay import ReplayResult
from state.step import Settled, settle, summarize

from .reports import Report, decode_bucket
from .sink import settle_reports
from .stateful import count_events


class ReplayCollector:
    """Keeps every settled batch in memory (a replay writes files, not a store) and each bucket's last state."""

    def __init__(self, config: Config, first_bucket: int) -> None:
        self.config = config
        self.first = first_bucket
        self.total = Settled()
        self.book_blob: bytes | None = None
        self.blobs: dict[int, bytes] = {}
        self.after_until = 0
        self.events = 0
        self.max_ts = -1
        self.batches = 0

    def add(self, reports: Iterable[Report]) -> Settled:
        """One micro-batch's reports; the propagation book round-trips through bytes as the store keeps it."""
        reports = list(reports)
        settled, book = settle_reports(self.config, reports, self.book_blob)
        self.book_blob = book.to_bytes()
        total = self.total
        total.decisions += settled.decisions
        total.propagations += settled.propagations
        total.dead_letters += settled.dead_letters
        total.counters.update(settled.counters)
        for r in reports:
            self.events += r.events
            self.max_ts = max(self.max_ts, r.max_ts)
            self.after_until += r.after_until
            if r.blob is not None:
                self.blobs[r.bucket] = r.blob
        self.batches += 1
        return settled

    def finish(self, until: int | None) -> ReplayResult:
        """Parse what each bucket still holds, then advance every engine and the book to `until` (default: the
        latest event time seen)."""
        total = self.total
        engines = []
        for bucket, blob in sorted(self.blobs.items()):
            held = decode_bucket(blob)
            valid: list[Event] = []
            for chunk in held.pending:
                for line in chunk.lines():
                    ev = parse_event(line.raw, line.seq, line.arrival)
                    if type(ev) is not DeadLetter:
                        valid.append(ev)
                    elif bucket == self.first or not line.shared:
                        total.add_dead_letters([ev])
            n, latest = count_events(valid, bucket == self.first)
            self.events, self.max_ts = self.events + n, max(self.max_ts, latest)
            engine = PartitionEngine(self.config, held.engine, emit_propagation_ticks=bucket == self.first)
            total.counters["late_events"] += engine.add(valid)
            engines.append(engine)
        end = until if until is not None else self.max_ts
        book = PropagationBook(self.config, self.book_blob)
        last = settle(book, [engine.advance(end + 1) for engine in engines], end + 1)
        partitions = sorted((p for engine in engines for p in engine.partitions.values()), key=lambda p: p.key)
        result = ReplayResult(
            decisions=total.decisions + last.decisions,
            propagations=total.propagations + last.propagations,
            records=[partition_record(p, self.config) for p in partitions],
            brokers=last.brokers,
            dead_letters=total.dead_letters,
            counters=total.counters + last.counters,
            watermark=end + 1,
        )
        buffered = sum(len(engine.buffer) for engine in engines)
        summary: dict[str, Any] = {
            "events": self.events + self.after_until,
            "events_after_until": self.after_until + buffered,
            "until": end,
            **summarize(result, len(partitions), book),
            "late_events": result.counters["late_events"],
            "micro_batches": self.batches,
            "config": self.config.to_dict(),
        }
        result.summary = summary
        return result
