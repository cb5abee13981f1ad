"""The foreachBatch sink: bucket reports in, per-broker propagation (SPEC §4.6), one store transaction out.

Spark allows one `applyInPandasWithState` per query, so the brokers' pending sets live here: the
`PropagationBook` is loaded from the store, fed the batch's ISR changes and ticks, advanced to the
settled time S, and written back in the same transaction as the outputs. S = min(watermark, each
bucket's last reported next_due): no bucket can still produce an ISR change before S, so the
propagation checks before S are final. The store skips a batch id it already committed, so a
re-run batch (after a crash) neither loses nor duplicates anything.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import msgspec

from state.config import Config
from state.partition import INF
from state.propagation import PropagationBook

from .buckets import CONTROL_KEY
from .reports import Report, decode_report

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from state.store import Store

BOOK_BLOB = "propagation_book"
CLOCK_BLOB = "stream_clock"


class Clock(msgspec.Struct, array_like=True):
    """Durable sink-side time keeping: the last watermark seen and every bucket's last next_due."""

    watermark: int = 0
    dues: dict[int, int] = {}

    @property
    def settled(self) -> int:
        return min(self.watermark, min(self.dues.values(), default=INF))


_clock_decoder = msgspec.msgpack.Decoder(Clock)


@dataclass
class Settled:
    """One batch's outputs, ready for the store, plus the new durable book and clock."""

    decisions: list[dict] = field(default_factory=list)
    propagations: list[dict] = field(default_factory=list)
    records: list[dict] = field(default_factory=list)
    dead_letters: list[dict] = field(default_factory=list)
    brokers: list[dict] = field(default_factory=list)
    counters: Counter[str] = field(default_factory=Counter)
    blobs: dict[str, bytes] = field(default_factory=dict)
    watermark: int | None = None  # the batch's Spark watermark (None: no state key ran)
    settled: int = 0
    after_until: int = 0
    book: PropagationBook | None = None
    reports: list[Report] = field(default_factory=list)


def collect(df: DataFrame) -> list[Report]:
    """Run the batch once (that also commits the state store) and decode its reports."""
    table = df.select("report").toArrow()
    return [decode_report(b) for b in table.column(0).to_pylist()]


def settle(config: Config, reports: Iterable[Report], book_blob: bytes | None, clock_blob: bytes | None,
           late_rows: int = 0) -> Settled:
    """Fold one batch's reports into store-ready outputs; pure, so a replay can run it without a store.

    `late_rows`: rows Spark dropped at or behind the watermark (counted as late dead letters).
    """
    out = Settled(reports=list(reports))
    book = PropagationBook(config, book_blob)
    clock = _clock_decoder.decode(clock_blob) if clock_blob else Clock()
    items: list = []
    counters = out.counters
    for r in out.reports:
        out.watermark = max(out.watermark or 0, r.watermark)
        out.dead_letters.extend(d.to_record() for d in r.dead)
        counters.update(f"dead_letters.{d.category}" for d in r.dead)
        if r.bucket == CONTROL_KEY:
            out.after_until += r.after_until
            continue
        clock.dues[r.bucket] = r.next_due
        out.decisions.extend(r.decisions)
        items.extend(r.changes)
        items.extend(r.ticks)
        out.records.extend(r.records)
        counters.update({f"ignored_fetches.{k}": v for k, v in r.ignored_fetches.items()})
        counters.update({f"ignored_appends.{k}": v for k, v in r.ignored_appends.items()})
        counters["late_events"] += r.late
    if out.watermark is not None:
        clock.watermark = max(clock.watermark, out.watermark)
    counters["late_events"] += late_rows + book.add(items)
    counters["dead_letters.late"] += late_rows
    out.settled = clock.settled
    out.propagations = book.advance(out.settled)
    out.brokers = book.brokers_view()
    out.book = book
    out.blobs = {BOOK_BLOB: book.to_bytes(), CLOCK_BLOB: msgspec.msgpack.encode(clock)}
    return out


BatchHook = Callable[[int, Settled, bool], None]


class StoreSink:
    """`foreachBatch` target: settle each batch against the store's book and commit it atomically."""

    def __init__(self, config: Config, store: Store, kafka: KafkaOutput | None = None,
                 on_batch: BatchHook | None = None, take_late: Callable[[], int] = lambda: 0) -> None:
        self.config = config
        self.store = store
        self.kafka = kafka
        self.on_batch = on_batch
        self.take_late = take_late  # late rows Spark reported (in earlier batches' progress) since the last call

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        reports = collect(df)
        last = self.store.last_batch_id()
        if last is not None and batch_id <= last:
            return  # a batch re-run after a restart: its outputs are already committed
        result = settle(self.config, reports, self.store.load_blob(BOOK_BLOB), self.store.load_blob(CLOCK_BLOB),
                        self.take_late())
        if self.kafka is not None:
            self.kafka.send(result)  # before the commit: at-least-once on a crash in between
        written = self.store.write_batch(
            batch_id, decisions=result.decisions, propagations=result.propagations, partitions=result.records,
            dead_letters=result.dead_letters, brokers=result.brokers, counters=+result.counters,
            blobs=result.blobs, watermark_ms=result.settled)
        if self.on_batch is not None:
            self.on_batch(batch_id, result, written)


class KafkaOutput:
    """Decisions and propagation batches as JSON Kafka records, keyed by partition and by broker."""

    def __init__(self, bootstrap: str, decisions_topic: str = "isrwatch.decisions",
                 propagations_topic: str = "isrwatch.propagations") -> None:
        from kafka import KafkaProducer

        self.producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20,
                                      value_serializer=msgspec.json.encode, key_serializer=str.encode)
        self.decisions_topic = decisions_topic
        self.propagations_topic = propagations_topic

    def send(self, result: Settled) -> None:
        send = self.producer.send
        for d in result.decisions:
            send(self.decisions_topic, key=f"{d['cluster']}/{d['topic']}/{d['partition']}", value=d)
        for p in result.propagations:
            send(self.propagations_topic, key=f"{p['cluster']}/{p['broker']}", value=p)
        self.producer.flush()

    def close(self) -> None:
        self.producer.close(timeout=5)
