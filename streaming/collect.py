"""A replay through the stream's shell: each micro-batch's reports settled and kept, then finished at --until.

`isrwatch replay --engine spark` feeds it from a real query; `isrwatch.streaming.testing.run_stateful` from the
state function called directly. When the input is drained, every bucket's final state is advanced to
--until + 1 with the same engine, and the propagation book likewise, exactly as the local replay ends
(SPEC §6): the result has the local replay's shape and summary keys.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from isrwatch.state.alter_partition import AlterPartitionBook
from isrwatch.state.audit import Audit, sorted_divergences
from isrwatch.state.clock import ClockBook
from isrwatch.state.config import Config
from isrwatch.state.engine import PartitionEngine
from isrwatch.state.events import Event
from isrwatch.state.eventtime import Role
from isrwatch.state.incidents import IncidentBook, merge_incidents
from isrwatch.state.metrics import LATE_EVENTS
from isrwatch.state.partition import recorded
from isrwatch.state.propagation import PropagationBook
from isrwatch.state.records import Divergence
from isrwatch.state.replay import ReplayResult
from isrwatch.state.step import Settled, settle, summarize

from .reports import Report, decode_bucket
from .sink import AUDIT_BLOB, BOOK_BLOB, CLOCKS_BLOB, INCIDENTS_BLOB, MANAGERS_BLOB, settle_reports
from .stateful import count_events


class ReplayCollector:
    """Keeps every settled batch in memory (a replay writes files, not a store) and each bucket's last state."""

    def __init__(self, config: Config, first_bucket: int) -> None:
        self.config = config
        self.first = first_bucket
        self.total = Settled()
        self.sink_blobs: dict[str, bytes] = {}
        self.blobs: dict[int, bytes] = {}
        self.after_until = 0
        self.events = 0
        self.max_ts = -1
        self.batches = 0

    def add(self, reports: Iterable[Report]) -> Settled:
        """One micro-batch's reports; the sink's state round-trips through bytes as the store keeps it."""
        reports = list(reports)
        settled, self.sink_blobs = settle_reports(self.config, reports, self.sink_blobs)
        total = self.total
        total.decisions += settled.decisions
        total.propagations += settled.propagations
        total.alter_partitions += settled.alter_partitions
        total.observed += settled.observed
        total.divergences += settled.divergences
        total.incidents = merge_incidents(total.incidents, settled.incidents)
        total.opened += settled.opened
        total.committed += settled.committed
        total.dead_letters += settled.dead_letters
        total.counters.update(settled.counters)
        total.frontiers.update(settled.frontiers)  # how far the batches settled each cluster by themselves
        total.watermark = max(total.frontiers.values(), default=None)
        for r in reports:
            self.events += r.events
            self.max_ts = max(self.max_ts, r.max_ts)
            self.after_until += r.after_until
            if r.blob is not None:
                self.blobs[r.bucket] = r.blob
        self.batches += 1
        return settled

    def finish(self, until: int | None) -> ReplayResult:
        """Advance every bucket's engines, with the events they still hold, and the book to `until` (default: the
        latest event time seen)."""
        total = self.total
        helds = {bucket: decode_bucket(blob) for bucket, blob in sorted(self.blobs.items())}
        # Jumps still waiting for corroboration: the input ends, and a replay trusts the times it has (SPEC §6).
        jumped = {bucket: [j.event for j in held.jumps if j.role != Role.BEACON] for bucket, held in helds.items()}
        for bucket, events in jumped.items():
            count, latest = count_events(events, bucket == self.first)
            self.events += count
            self.max_ts = max(self.max_ts, latest)
        end = until if until is not None else self.max_ts
        outputs = []
        records = []
        buffered = 0
        audit = Audit(self.config, self.sink_blobs.get(AUDIT_BLOB))
        judged: list[Divergence] = []
        pending = 0
        for bucket, held in helds.items():
            mine = []
            waiting: dict[str, list[Event]] = {}
            for chunk in held.pending:
                waiting.setdefault(chunk.cluster, []).extend(chunk.events())
            for ev in jumped[bucket]:
                waiting.setdefault(ev.cluster, []).append(ev)
            for cluster in sorted(held.engines.keys() | waiting.keys()):
                engine = PartitionEngine(self.config, held.engines.get(cluster), owns_ticks=bucket == self.first)
                total.counters[LATE_EVENTS.tally] += engine.add(waiting.get(cluster, []))
                mine.append(engine.advance(end + 1))
                records.extend(engine.record(p) for p in engine.partitions.values())
                buffered += len(engine.buffer)
            # The key's audit of its own partitions, as the state function keeps it (`stateful.audit_own`).
            own = Audit(self.config, held.audit)
            divergences, marks = own.pair(
                [w for o in mine for w in o.writes],
                [x for o in mine for x in o.observed],
                [r for o in mine for r in o.resyncs],
                end + 1,
            )
            judged += divergences
            audit.take(marks, own.new_brokers)
            pending += own.pending()
            for o in mine:
                o.observed = recorded(o.observed, bucket == self.first)
            outputs += mine
        book = PropagationBook(self.config, self.sink_blobs.get(BOOK_BLOB))
        managers = AlterPartitionBook(self.sink_blobs.get(MANAGERS_BLOB))
        clocks = ClockBook(self.sink_blobs.get(CLOCKS_BLOB))
        incidents = IncidentBook(self.config, self.sink_blobs.get(INCIDENTS_BLOB))
        last = settle(book, outputs, end + 1, audit, managers, clocks, incidents, judged)
        records.sort(key=lambda r: (r.cluster, r.topic, r.partition))
        result = ReplayResult(
            decisions=total.decisions + last.decisions,
            propagations=total.propagations + last.propagations,
            alter_partitions=total.alter_partitions + last.alter_partitions,
            observed=total.observed + last.observed,
            divergences=sorted_divergences(total.divergences + last.divergences),
            records=records,
            brokers=last.brokers,
            dead_letters=total.dead_letters,
            counters=total.counters + last.counters,
            watermark=last.watermark,
            frontiers=last.frontiers,
            incidents=merge_incidents(total.incidents, last.incidents),
            opened=total.opened + last.opened,
            committed=total.committed + last.committed,
        )
        summary: dict[str, Any] = {
            "events": self.events + self.after_until,
            "events_after_until": self.after_until + buffered,
            "until": end,
            **summarize(result, len(records), book, audit.pending() + pending),
            "late_events": result.counters[LATE_EVENTS.tally],
            "micro_batches": self.batches,
            "config": self.config.to_dict(),
        }
        result.summary = summary
        return result
