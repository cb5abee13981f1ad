"""The foreachBatch sink: bucket reports in, per-broker propagation (SPEC §4.6), one store transaction out.

Spark allows one `applyInPandasWithState` per query, so the brokers' pending sets live here: the
`PropagationBook` is loaded from the store, fed the batch's ISR changes and ticks, advanced to the
batch's watermark W, and written back in the same transaction as the outputs. That is safe: in the
batch whose watermark is W, every key with new lines or with a timeout (its next_due) before W is
called and applies everything before W; every other key cannot change anything before W. So all
ISR changes before W are in hand and the propagation checks before W are final — also those that
send a pending batch when no new change arrives (the first bucket answers every watermark move, so
W is known even in a batch where no key has anything to do). The store skips a batch id it already
committed, so a batch re-run after a crash neither loses nor duplicates anything.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import msgspec

from state.config import Config
from state.propagation import PropagationBook

from .reports import Report, decode_report

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from state.store import Store

BOOK_BLOB = "propagation_book"
@dataclass
class Settled:
    """One batch's outputs, ready for the store, with the propagation book they leave behind."""

    decisions: list[dict] = field(default_factory=list)
    propagations: list[dict] = field(default_factory=list)
    records: list[dict] = field(default_factory=list)
    dead_letters: list[dict] = field(default_factory=list)
    brokers: list[dict] = field(default_factory=list)
    counters: Counter[str] = field(default_factory=Counter)
    blobs: dict[str, bytes] = field(default_factory=dict)
    watermark: int | None = None  # the batch's watermark: outputs before it are final (None: no key ran)
    after_until: int = 0
    book: PropagationBook | None = None
    reports: list[Report] = field(default_factory=list)


def collect(df: DataFrame) -> list[Report]:
    """Run the batch once (that also commits the state store) and decode its reports."""
    table = df.select("report").toArrow()
    return [decode_report(b) for b in table.column(0).to_pylist()]


def settle(config: Config, reports: Iterable[Report], book_blob: bytes | None) -> Settled:
    """Fold one batch's reports into store-ready outputs; pure, so a replay can run it without a store."""
    out = Settled(reports=list(reports))
    book = PropagationBook(config, book_blob)
    items: list = []
    counters = out.counters
    for r in out.reports:
        out.watermark = max(out.watermark or 0, r.watermark)
        out.dead_letters.extend(d.to_record() for d in r.dead)
        counters.update(f"dead_letters.{d.category}" for d in r.dead)
        counters["late_events"] += sum(1 for d in r.dead if d.category == "late") + r.late
        out.after_until += r.after_until
        out.decisions.extend(r.decisions)
        items.extend(r.changes)
        items.extend(r.ticks)
        out.records.extend(r.records)
        counters.update({f"ignored_fetches.{k}": v for k, v in r.ignored_fetches.items()})
        counters.update({f"ignored_appends.{k}": v for k, v in r.ignored_appends.items()})
    counters["late_events"] += book.add(items)
    if out.watermark is not None:
        out.propagations = book.advance(out.watermark)
    out.brokers = book.brokers_view()
    out.book = book
    out.blobs = {BOOK_BLOB: book.to_bytes()}
    return out


BatchHook = Callable[[int, Settled, bool], None]


class StoreSink:
    """`foreachBatch` target: settle each batch against the store's book and commit it atomically."""

    def __init__(self, config: Config, store: Store, kafka: KafkaOutput | None = None,
                 on_batch: BatchHook | None = None) -> None:
        self.config = config
        self.store = store
        self.kafka = kafka
        self.on_batch = on_batch

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        reports = collect(df)
        last = self.store.last_batch_id()
        if last is not None and batch_id <= last:
            return  # a batch re-run after a restart: its outputs are already committed
        result = settle(self.config, reports, self.store.load_blob(BOOK_BLOB))
        if self.kafka is not None:
            self.kafka.send(result)  # before the commit: at-least-once on a crash in between
        written = self.store.write_batch(
            batch_id, decisions=result.decisions, propagations=result.propagations, partitions=result.records,
            dead_letters=result.dead_letters, brokers=result.brokers, counters=+result.counters,
            blobs=result.blobs, watermark_ms=result.watermark)
        if self.on_batch is not None:
            self.on_batch(batch_id, result, written)


class KafkaOutput:
    """Decisions and propagation batches as JSON Kafka records, keyed by partition and by broker."""

    def __init__(self, bootstrap: str, decisions_topic: str = "isrwatch.decisions",
                 propagations_topic: str = "isrwatch.propagations") -> None:
        from kafka import KafkaProducer

        self.producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20)
        self.decisions_topic = decisions_topic
        self.propagations_topic = propagations_topic

    def send(self, result: Settled) -> None:
        send, encode = self.producer.send, msgspec.json.encode
        for d in result.decisions:
            send(self.decisions_topic, key=f"{d['cluster']}/{d['topic']}/{d['partition']}".encode(), value=encode(d))
        for p in result.propagations:
            send(self.propagations_topic, key=f"{p['cluster']}/{p['broker']}".encode(), value=encode(p))
        self.producer.flush()

    def close(self) -> None:
        self.producer.close(timeout=5)
