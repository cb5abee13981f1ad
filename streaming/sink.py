"""The foreachBatch sink: the executors write the partition rows, the driver settles what is cluster-wide.

Each state key's report goes through `write_partitions` on the executor that ran the key: its partition rows (only
those due, `records.row_due`) go to the store in a transaction of their own, tagged with the batch id, and only the
rest comes to the driver, which settles it and commits the batch in one transaction (SPEC §5, §6).

Spark allows one `applyInPandasWithState` per query, so the brokers' pending sets live here: the
`PropagationBook` is loaded from the store, fed the batch's ISR changes and ticks, advanced, and
written back in the same transaction as the outputs. Each cluster's propagation advances to the
smallest frontier any state key that can still change that cluster has reported (`Frontiers`): by
then every ISR change before it is in hand, so the checks before it are final — also those that
send a pending batch when no new change arrives. The store skips a batch id it already committed,
so a batch re-run after a crash neither loses nor duplicates anything.
"""

from __future__ import annotations

import sqlite3
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, TypeVar

import msgspec
import psycopg
import pyarrow as pa

from isrwatch.state.alter_partition import AlterPartitionBook
from isrwatch.state.audit import Audit
from isrwatch.state.clock import ClockBook
from isrwatch.state.config import Config
from isrwatch.state.incidents import IncidentBook
from isrwatch.state.metrics import LATE_EVENTS
from isrwatch.state.propagation import PropagationBook
from isrwatch.state.records import Divergence, PartitionRecord
from isrwatch.state.schedule import INF
from isrwatch.state.step import Settled, settle
from isrwatch.store import StoreError, Writer

from .producer import JsonProducer
from .reports import Report, decode_report, encode

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from isrwatch.store import Store

R = TypeVar("R")
BOOK_BLOB = "propagation_book"
AUDIT_BLOB = "audit"
# What an unreachable store raises: the sink waits and retries on these, any other error fails the batch at once.
STORE_DOWN: tuple[type[BaseException], ...] = (
    StoreError,
    sqlite3.OperationalError,
    psycopg.OperationalError,
    psycopg.InterfaceError,
)
FRONTIERS_BLOB = "frontiers"
MANAGERS_BLOB = "alter_partition_managers"  # the brokers' AlterPartition managers, kept as the propagation book is
CLOCKS_BLOB = "clocks"  # the reporting brokers' clocks (isrwatch.state.clock), likewise
INCIDENTS_BLOB = "incidents"  # the open incidents and the timeline's running state (isrwatch.state.incidents)
# The sink's state, kept in the store with each batch.
SINK_BLOBS = (BOOK_BLOB, AUDIT_BLOB, FRONTIERS_BLOB, MANAGERS_BLOB, CLOCKS_BLOB, INCIDENTS_BLOB)


class Frontiers(msgspec.Struct, array_like=True):
    """How far each state key has applied each cluster it can still change; a cluster is settled up to the
    smallest of its keys' frontiers."""

    by_bucket: dict[int, dict[str, int]] = {}

    @classmethod
    def load(cls, blob: bytes | None) -> Frontiers:
        return cls() if blob is None else _frontiers.decode(blob)

    def report(self, bucket: int, frontiers: dict[str, int]) -> None:
        """A key's report lists every cluster it can still change: one it no longer lists holds nothing back (a key
        whose only pending events of a cluster were applied would otherwise keep that cluster at its last frontier
        until it next had one pending: with each broker's own stream time, most calls have none)."""
        if frontiers:
            self.by_bucket[bucket] = dict(frontiers)
        else:
            self.by_bucket.pop(bucket, None)

    def settled(self) -> dict[str, int]:
        """Each cluster's settled time; a cluster some key has not yet applied at all is not settled anywhere."""
        out: dict[str, int] = {}
        for frontiers in self.by_bucket.values():
            for cluster, at in frontiers.items():
                out[cluster] = min(out.get(cluster, at), at)
        return {cluster: at for cluster, at in out.items() if at > -INF}


_frontiers = msgspec.msgpack.Decoder(Frontiers)


def collect(df: DataFrame) -> list[Report]:
    """Run the batch once (that also commits the state store) and decode its reports."""
    table = df.select("report").toArrow()
    return [decode_report(b) for b in table.column(0).to_pylist()]


WRITTEN_SCHEMA = "report binary, rows int"
_WRITTEN = pa.schema([("report", pa.binary()), ("rows", pa.int32())])
_stores: dict[str, Writer] = {}  # an executor's Python worker keeps one store per URL across batches


def write_partitions(
    url: str, batch_id: int, retry_seconds: float
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The executors' side of a batch (`mapInArrow` on its reports): each state key's partition rows go to the store
    in a transaction of their own (`Writer.write_partitions`), and only the rest of its report, what is cluster-wide,
    goes on to the driver, with how many rows were written."""

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            reports, counts = [], []
            for blob in batch.column("report").to_pylist():
                report = decode_report(blob)
                rows = list(zip(report.records, report.as_of, strict=True))
                if rows:
                    retrying(
                        partial(_write, url, batch_id, rows), batch_id, retry_seconds, _stderr, partial(_drop, url)
                    )
                report.records, report.as_of = [], []
                reports.append(encode(report))
                counts.append(len(rows))
            yield pa.RecordBatch.from_arrays(
                [pa.array(reports, pa.binary()), pa.array(counts, pa.int32())], schema=_WRITTEN
            )

    return write


def _write(url: str, batch_id: int, rows: list[tuple[PartitionRecord, int]]) -> bool:
    store = _stores.get(url)
    if store is None:
        store = _stores[url] = Writer(url)
    return store.write_partitions(batch_id, rows)


def _drop(url: str) -> None:
    """Forget the worker's store (reconnect on the next attempt)."""
    store = _stores.pop(url, None)
    if store is not None:
        store.close()


def _stderr(message: str) -> None:
    print(f"isrwatch: {message}", file=sys.stderr, flush=True)


def retrying(
    attempt: Callable[[], R],
    batch_id: int,
    retry_seconds: float,
    say: Callable[[str], None] | None,
    reset: Callable[[], None],
) -> R:
    """`attempt` until the store answers: a store down (`STORE_DOWN`) is waited for with backoff for up to
    `retry_seconds`, then the error goes up (and fails the batch); `reset` drops the connection in between."""
    deadline = time.monotonic() + retry_seconds
    pause = 0.5
    while True:
        try:
            return attempt()
        except STORE_DOWN as exc:
            if time.monotonic() + pause > deadline:
                raise
            if say:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                what = f"{type(exc).__name__}: {first}"
                say(f"batch {batch_id}: the store did not answer ({what}); retrying in {pause:g} s")
            reset()  # reconnect on the next attempt
            time.sleep(pause)
            pause = min(pause * 2, 15.0)


def settle_reports(
    config: Config, reports: Iterable[Report], blobs: Mapping[str, bytes | None]
) -> tuple[Settled, dict[str, bytes]]:
    """One batch's reports as one settled step, and the sink's state it leaves behind (`SINK_BLOBS`); pure, so
    a replay can run it without a store."""
    reports = list(reports)
    book = PropagationBook(config, blobs.get(BOOK_BLOB))
    audit = Audit(config, blobs.get(AUDIT_BLOB))
    managers = AlterPartitionBook(blobs.get(MANAGERS_BLOB))
    frontiers = Frontiers.load(blobs.get(FRONTIERS_BLOB))
    clocks = ClockBook(blobs.get(CLOCKS_BLOB))
    incidents = IncidentBook(config, blobs.get(INCIDENTS_BLOB))
    judged: list[Divergence] = []
    for r in reports:
        frontiers.report(r.bucket, r.frontiers)
        clocks.merge(r.clocks)
        audit.take(r.marks, r.audited)  # the keys paired their partitions' ISR writes: the batches are judged here
        judged += (d.divergence() for d in r.divergences)
    settled = settle(book, reports, frontiers.settled(), audit, managers, clocks, incidents, judged)
    for r in reports:
        settled.add_dead_letters(r.dead)
        settled.counters[LATE_EVENTS.tally] += sum(1 for d in r.dead if d.category == "late")
        settled.records.extend(r.records)
        keys = ((rec.cluster, rec.topic, rec.partition) for rec in r.records)
        settled.as_of.update(zip(keys, r.as_of, strict=True))
    return settled, {
        BOOK_BLOB: book.to_bytes(),
        MANAGERS_BLOB: managers.to_bytes(),
        AUDIT_BLOB: audit.to_bytes(),
        FRONTIERS_BLOB: msgspec.msgpack.encode(frontiers),
        CLOCKS_BLOB: clocks.to_bytes(),
        INCIDENTS_BLOB: incidents.to_bytes(),
    }


BatchHook = Callable[[int, Settled, bool], None]


@dataclass(eq=False)
class StoreSink:
    """`foreachBatch` target: settle each batch against the store's state and commit it atomically.

    A store that does not answer (a database restart, a network cut) does not lose the batch: the
    commit is retried with backoff for up to `retry_seconds`, then the batch fails, and with it the
    query, which resumes from its checkpoint when restarted.
    """

    config: Config
    store: Store
    kafka: KafkaOutput | None = None
    on_batch: BatchHook | None = None
    retry_seconds: float = 600.0
    say: Callable[[str], None] | None = None

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        # One Spark job: the state keys run, the executors write their partition rows, the rest comes here.
        table = df.mapInArrow(
            write_partitions(self.store.absolute_url, batch_id, self.retry_seconds), WRITTEN_SCHEMA
        ).toArrow()
        reports = [decode_report(b) for b in table.column("report").to_pylist()]
        rows = sum(table.column("rows").to_pylist())
        retrying(
            lambda: self._commit(batch_id, reports, rows), batch_id, self.retry_seconds, self.say, self.store.close
        )

    def _commit(self, batch_id: int, reports: list[Report], rows: int) -> None:
        last = self.store.last_batch_id()
        if last is not None and batch_id <= last:
            return  # a batch re-run after a restart: its outputs are already committed
        settled, blobs = settle_reports(self.config, reports, {name: self.store.load_blob(name) for name in SINK_BLOBS})
        settled.partitions_written = rows
        if self.kafka is not None:
            self.kafka.send(settled, batch_id)  # before the commit: at-least-once, deduplicated by batch id and seq
        written = self.store.write_batch(
            batch_id,
            settled,
            blobs=blobs,
            watermark_ms=settled.watermark,
            frontiers=settled.frontiers,
            as_of=settled.as_of,
        )
        if self.on_batch is not None:
            self.on_batch(batch_id, settled, written)


class KafkaOutput:
    """Decisions, propagation batches, AlterPartition requests and incidents as JSON Kafka records, keyed by
    partition, by broker, by broker and by incident (each version of an incident as it changed: the latest per key
    is the incident, so the topic may be compacted).

    Delivery is at least once: a batch re-run after a failure sends its records again. Every record carries
    the headers `isrwatch-batch` and `isrwatch-seq` (the same on a re-run), by which a consumer drops what it
    has seen; the producer is idempotent, so its own retries add no duplicates.
    """

    def __init__(
        self,
        bootstrap: str,
        decisions_topic: str = "isrwatch.decisions",
        propagations_topic: str = "isrwatch.propagations",
        alter_partitions_topic: str = "isrwatch.alter-partitions",
        incidents_topic: str = "isrwatch.incidents",
    ) -> None:
        self.producer = JsonProducer(bootstrap, acks="all", enable_idempotence=True)
        self.decisions_topic = decisions_topic
        self.propagations_topic = propagations_topic
        self.alter_partitions_topic = alter_partitions_topic
        self.incidents_topic = incidents_topic

    def send(self, settled: Settled, batch_id: int) -> None:
        batch = str(batch_id).encode()
        self._send_each(
            self.decisions_topic, settled.decisions, batch, lambda d: f"{d.cluster}/{d.topic}/{d.partition}"
        )
        self._send_each(self.propagations_topic, settled.propagations, batch, lambda p: f"{p.cluster}/{p.broker}")
        self._send_each(
            self.alter_partitions_topic, settled.alter_partitions, batch, lambda r: f"{r.cluster}/{r.broker}"
        )
        self._send_each(
            self.incidents_topic,
            [i.to_record() for i in settled.incidents],
            batch,
            lambda i: f"{i['cluster']}/{i['id']}",
        )
        self.producer.flush()

    def _send_each(self, topic: str, records: Sequence[R], batch: bytes, key: Callable[[R], str]) -> None:
        """Each record as JSON under its key, with the batch id and its place in the batch as headers."""
        send, encode = self.producer.send, msgspec.json.encode
        for seq, r in enumerate(records):
            send(topic, key(r).encode(), encode(r), [("isrwatch-batch", batch), ("isrwatch-seq", str(seq).encode())])

    def close(self) -> None:
        self.producer.close()
