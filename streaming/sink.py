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

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import msgspec

from state.config import Config
from state.propagation import PropagationBook
from state.step import Settled, settle

from .producer import JsonProducer
from .reports import Report, decode_report

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from state.store import Store

BOOK_BLOB = "propagation_book"


def collect(df: DataFrame) -> list[Report]:
    """Run the batch once (that also commits the state store) and decode its reports."""
    table = df.select("report").toArrow()
    return [decode_report(b) for b in table.column(0).to_pylist()]


def settle_reports(
    config: Config, reports: Iterable[Report], book_blob: bytes | None
) -> tuple[Settled, PropagationBook]:
    """One batch's reports as one settled step (the batch's watermark is the newest a key reported), and the
    propagation book it leaves behind; pure, so a replay can run it without a store."""
    reports = list(reports)
    book = PropagationBook(config, book_blob)
    watermark = max((r.watermark for r in reports), default=None)
    settled = settle(book, reports, watermark)
    for r in reports:
        settled.add_dead_letters(r.dead)
        settled.counters["late_events"] += r.late + sum(1 for d in r.dead if d.category == "late")
        settled.records.extend(r.records)
    return settled, book


BatchHook = Callable[[int, Settled, bool], None]


class StoreSink:
    """`foreachBatch` target: settle each batch against the store's book and commit it atomically."""

    def __init__(
        self, config: Config, store: Store, kafka: KafkaOutput | None = None, on_batch: BatchHook | None = None
    ) -> None:
        self.config = config
        self.store = store
        self.kafka = kafka
        self.on_batch = on_batch

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        reports = collect(df)
        last = self.store.last_batch_id()
        if last is not None and batch_id <= last:
            return  # a batch re-run after a restart: its outputs are already committed
        settled, book = settle_reports(self.config, reports, self.store.load_blob(BOOK_BLOB))
        if self.kafka is not None:
            self.kafka.send(settled)  # before the commit: at-least-once on a crash in between
        written = self.store.write_batch(
            batch_id,
            decisions=settled.decisions,
            propagations=settled.propagations,
            partitions=settled.records,
            dead_letters=settled.dead_letters,
            brokers=settled.brokers,
            counters=+settled.counters,
            blobs={BOOK_BLOB: book.to_bytes()},
            watermark_ms=settled.watermark,
        )
        if self.on_batch is not None:
            self.on_batch(batch_id, settled, written)


class KafkaOutput:
    """Decisions and propagation batches as JSON Kafka records, keyed by partition and by broker."""

    def __init__(
        self,
        bootstrap: str,
        decisions_topic: str = "isrwatch.decisions",
        propagations_topic: str = "isrwatch.propagations",
    ) -> None:
        self.producer = JsonProducer(bootstrap, acks="all")
        self.decisions_topic = decisions_topic
        self.propagations_topic = propagations_topic

    def send(self, settled: Settled) -> None:
        send, encode = self.producer.send, msgspec.json.encode
        for d in settled.decisions:
            send(self.decisions_topic, key=f"{d.cluster}/{d.topic}/{d.partition}".encode(), value=encode(d))
        for p in settled.propagations:
            send(self.propagations_topic, key=f"{p.cluster}/{p.broker}".encode(), value=encode(p))
        self.producer.flush()

    def close(self) -> None:
        self.producer.close()
