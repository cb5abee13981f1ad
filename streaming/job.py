"""`isrwatch run`: the streaming job — source, stateful query, store sink, progress — startable in-process.

`StreamJob(options).run()` blocks (the CLI); `start()` returns at once and `stop()` ends it (a
demo or test driving the job in its own process). Either way one line per micro-batch reports
what the batch did.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from isrwatch.state.config import Config, ConfigError
from isrwatch.state.step import Settled
from isrwatch.store import DEFAULT_STORE

from .buckets import Layout
from .checkpoint import Checkpoint
from .preflight import check_executors, python_start_failure
from .progress import ProgressListener, lost_records, progress_record
from .query import plan
from .sink import KafkaOutput, StoreSink
from .sources import arrival_warnings, parse_source, read_stream
from .spark import SparkSettings, is_local, session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from isrwatch.store import Store

Echo = Callable[[str], None]
ProgressHook = Callable[[dict[str, Any]], None]


@dataclass
class JobOptions:
    """Everything `isrwatch run` takes; the defaults are the embedded setup (files in ./var)."""

    source: str = "files:./var/events"
    store: str = DEFAULT_STORE
    checkpoint: str = "./var/checkpoint"
    config: Config = field(default_factory=Config)
    buckets: int | None = None  # None: the checkpoint's, or 16 for a new one
    trigger_seconds: float = 5.0
    max_per_batch: int | None = None  # files (files:) or records (kafka:, kafka-python:) per micro-batch
    starting: str = "earliest"
    available_now: bool = False  # process what is there, then stop
    until_idle: float | None = None  # stop after this many seconds without new input
    kafka_output: str | None = None
    store_retry_seconds: float = 600.0  # how long a batch waits for an unreachable store before the query fails
    spark: SparkSettings = field(default_factory=SparkSettings)


def describe_failure(exc: BaseException) -> str:
    """A failed query's error in one line: Spark's error class and, for Python errors, the exception itself; for
    an executor that could not start its Python, the node and the path."""
    text = str(exc)
    python = python_start_failure(text)
    if python is not None:
        return python
    head = text.split("\n", 1)[0].split(": Traceback", 1)[0].strip()
    body = text.split("=== Streaming Query ===", 1)[0]
    lines = [line.strip() for line in body.splitlines() if line.strip() and not line.strip().startswith("SQLSTATE")]
    last = lines[-1] if lines else ""
    return head if not last or last.startswith(head) else f"{head}: {last}"


def _utc(ms: int | None) -> str:
    return "-" if not ms else datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class StreamJob:
    """One streaming query plus its store, listener and optional Kafka output."""

    def __init__(
        self,
        options: JobOptions,
        echo: Echo | None = None,
        on_batch: Callable[..., None] | None = None,
        on_progress: ProgressHook | None = None,
    ) -> None:
        self.options = options
        self.echo = echo
        self.on_batch = on_batch
        self.on_progress = on_progress
        self.source = parse_source(options.source)
        self.query: StreamingQuery | None = None
        self.spark: SparkSession | None = None
        self.store: Store | None = None
        self.kafka: KafkaOutput | None = None
        self._listener: ProgressListener | None = None
        self.name = ""
        self._batches: dict[int, Settled] = {}
        self._last_input = time.monotonic()
        self._recorded = -1
        self._stopping = threading.Event()

    def start(self) -> StreamingQuery:
        from isrwatch.store import open_store

        o = self.options
        if "://" not in o.checkpoint:  # with the defaults, ./var: the store's directory too
            Path(o.checkpoint).mkdir(parents=True, exist_ok=True)
        store = self.store = open_store(o.store)
        spark = self.spark = session(o.spark)
        if not is_local(spark):
            ready = check_executors(spark)
            self._say(f"executors ready: {', '.join(f'{host} ({python})' for host, python in ready)}")
        checkpoint = Checkpoint(o.checkpoint, spark)
        fresh = not checkpoint.has_entries("offsets")
        last = store.last_batch_id()
        if fresh and last is not None:
            raise ConfigError(
                f"store {o.store} already holds batches up to {last} from another checkpoint; "
                f"give the --checkpoint that wrote them, or a new store"
            )
        if not fresh and last is None:
            self._say(
                f"warning: checkpoint {o.checkpoint} has run before but store {o.store} is empty: "
                "earlier batches' outputs and the brokers' pending sets are not in it"
            )
        layout = Layout.for_checkpoint(checkpoint, o.buckets, int(spark.conf.get("spark.sql.shuffle.partitions")))
        reports = plan(read_stream(spark, self.source, o.max_per_batch, o.starting), o.config, layout)
        if o.kafka_output:
            self.kafka = KafkaOutput(o.kafka_output)
        sink = StoreSink(o.config, store, self.kafka, self._batch_done, o.store_retry_seconds, self._say)
        self.name = f"isrwatch-{checkpoint.name}-{id(self):x}"
        store.claim({"job": self.name, "host": socket.gethostname(), "pid": os.getpid(), "checkpoint": checkpoint.uri})
        writer = reports.writeStream.queryName(self.name).foreachBatch(sink)
        writer = writer.option("checkpointLocation", checkpoint.uri)
        writer = (
            writer.trigger(availableNow=True)
            if o.available_now
            else writer.trigger(processingTime=f"{int(o.trigger_seconds * 1000)} milliseconds")
        )
        self._listener = ProgressListener(self.name, self._progress)
        spark.streams.addListener(self._listener)
        self._say(
            f"{self.source} -> {o.store}; checkpoint {o.checkpoint}, {layout.buckets} buckets over "
            f"{layout.shuffle_partitions} shuffle partitions, {o.spark.state_store} state store, "
            + ("available data only" if o.available_now else f"trigger {o.trigger_seconds:g} s")
        )
        for warning in arrival_warnings(self.source):
            self._warn(warning)
        self._last_input = time.monotonic()
        self.query = writer.start()
        return self.query

    def wait(self) -> None:
        """Block until the query ends: all available data done, idle for --until-idle, or stop()."""
        query = self.query
        assert query is not None, "start() first"
        while query.isActive and not self._stopping.is_set():
            query.awaitTermination(0.5)
            idle = self.options.until_idle
            if idle is not None and time.monotonic() - self._last_input > idle and not query.status["isTriggerActive"]:
                self._say(f"no new input for {idle:g} s: stopping")
                break

    def request_stop(self) -> None:
        """Ask `wait()` to stop the job (safe from a signal handler or another thread)."""
        self._stopping.set()

    def stop(self) -> None:
        """Stop the query (between batches if possible), release the store and the Kafka producer.

        Raises the query's error if it failed. Stopping again does nothing.
        """
        self._stopping.set()
        query, self.query = self.query, None
        try:
            if query is not None:
                if query.isActive:
                    query.stop()
                error = query.exception()
                if error is not None:
                    raise error
                self._drain_progress(query)
        finally:
            if self._listener is not None and self.spark is not None:
                self.spark.streams.removeListener(self._listener)
                self._listener = None
            if self.kafka is not None:
                self.kafka.close()
                self.kafka = None
            if self.store is not None:
                self.store.close()

    def _drain_progress(self, query: StreamingQuery, timeout: float = 10.0) -> None:
        """Wait for the listener to record the last batch: Spark delivers progress events asynchronously."""
        last = query.lastProgress
        deadline = time.monotonic() + timeout
        while last is not None and self._recorded < last["batchId"] and time.monotonic() < deadline:
            time.sleep(0.05)

    def run(self) -> int:
        self.start()
        try:
            self.wait()
        finally:
            self.stop()
        return 0

    def _say(self, message: str) -> None:
        if self.echo:
            self.echo(message)

    def _warn(self, message: str) -> None:
        """A warning is said even without an echo (`--quiet`): on stderr then."""
        if self.echo:
            self.echo(f"warning: {message}")
        else:
            print(f"isrwatch: warning: {message}", file=sys.stderr, flush=True)

    def _batch_done(self, batch_id: int, result: Settled, written: bool) -> None:
        self._batches[batch_id] = result
        if self.on_batch is not None:
            self.on_batch(batch_id, result, written)

    def _progress(self, raw: dict[str, Any]) -> None:
        result = self._batches.pop(raw["batchId"], None)
        lost = lost_records(raw)
        for gone in lost:
            self._warn(f"batch {raw['batchId']}: {gone}")
        record = progress_record(raw, lost)
        if result is not None:
            record["watermark_ms"] = result.watermark
            record["late_rows"] = result.counters.get("late_events", 0)
        assert self.store is not None
        self.store.record_progress(record)
        self._recorded = max(self._recorded, record["batch_id"])
        if record["input_rows"]:
            self._last_input = time.monotonic()
        if self.on_progress is not None:
            self.on_progress(raw)
        if result is None and not record["input_rows"]:
            return  # an idle trigger or a no-data batch that settled nothing new
        line = (
            f"batch {record['batch_id']}: {record['input_rows']:,} events in "
            f"{record['batch_duration_ms'] / 1000:.1f} s ({record['processed_rows_per_second']:,.0f}/s), "
            f"watermark {_utc(record['watermark_ms'])}"
        )
        if result is not None:
            line += (
                f"; {len(result.decisions):,} decisions, {len(result.propagations):,} propagations, "
                f"{_updated(result):,} partitions updated, {len(result.dead_letters):,} dead letters"
            )
            late = result.counters.get("late_events", 0)
            line += f" ({late:,} late)" if late else ""
        self._say(line)


def _updated(result: Settled) -> int:
    """Partition rows a batch wrote: the executors' count, or the records the driver wrote."""
    return len(result.records) if result.partitions_written is None else result.partitions_written
