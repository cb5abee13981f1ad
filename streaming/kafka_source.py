"""`kafka-python:` — a Spark 4 Python streaming data source over kafka-python (no JVM Kafka connector).

Offsets are per Kafka partition: {"topic": {"partition": next_offset}}. The end of a partition is
its high watermark, from ListOffsets(LATEST) (what a read_uncommitted consumer can read). Each
micro-batch reads fixed offset ranges, so a batch Spark re-runs after a restart reads exactly the
same records.
"""

from __future__ import annotations

import itertools
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from isrwatch.state.config import ConfigError

from .framing import binary_array

NAME = "isrwatch_kafka"
SCHEMA = "value binary, origin string, part int, offset long, received long"
_ARROW = pa.schema(
    [
        ("value", pa.binary()),
        ("origin", pa.string()),
        ("part", pa.int32()),
        ("offset", pa.int64()),
        ("received", pa.int64()),
    ]
)
Offsets = dict[str, dict[str, int]]
T = TypeVar("T")
LOG_APPEND_TIME = 1  # a record's timestamp type (Kafka's TimestampType id; 0: CreateTime, the producer's clock)
TIMESTAMP_TYPE = "message.timestamp.type"  # the topic config that makes Kafka stamp records on append
RETRY_PAUSES_S = (1, 2, 5, 10, 30)  # then every 30 s: a broker that is down does not fail the query
BOOTSTRAP_TIMEOUT_MS = 10_000  # as the Java client's socket.connection.setup.timeout.ms
# Sets another bootstrap timeout (ms): shorter where Kafka answers in milliseconds or not at all (the suite's outage
# test), longer over a slow network. The job's Python workers inherit it from the job's environment.
BOOTSTRAP_TIMEOUT_ENV = "ISRWATCH_KAFKA_BOOTSTRAP_TIMEOUT_MS"


def bootstrap_timeout_ms() -> int:
    """How long a client waits for Kafka to answer before the source calls it unreachable: BOOTSTRAP_TIMEOUT_MS, or
    $ISRWATCH_KAFKA_BOOTSTRAP_TIMEOUT_MS."""
    raw = os.environ.get(BOOTSTRAP_TIMEOUT_ENV, "").strip()
    if not raw:
        return BOOTSTRAP_TIMEOUT_MS
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(f"{BOOTSTRAP_TIMEOUT_ENV}={raw!r}: expected a positive number of milliseconds")
    return int(raw)


def retrying(bootstrap: str, what: str, attempt: Callable[[], T]) -> T:
    """Run `attempt` until Kafka answers, waiting longer between tries and saying so on stderr each time."""
    from kafka.errors import KafkaError

    for n in itertools.count():
        try:
            return attempt()
        except (KafkaError, OSError, TimeoutError) as exc:
            pause = RETRY_PAUSES_S[min(n, len(RETRY_PAUSES_S) - 1)]
            print(
                f"isrwatch: kafka-python source: Kafka at {bootstrap} unreachable while {what} "
                f"({type(exc).__name__}: {exc}); retrying in {pause} s",
                file=sys.stderr,
                flush=True,
            )
            time.sleep(pause)
    raise AssertionError("unreachable")


class KafkaRange(InputPartition):
    """One Kafka partition's records [start, end) for one micro-batch."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end


def _consumer(bootstrap: str, **settings: Any) -> Any:
    """A consumer that gives up bootstrapping after `bootstrap_timeout_ms()` (kafka-python's default: 30 s), so that
    an unreachable Kafka is said on stderr, and tried again, within seconds."""
    from kafka import KafkaConsumer

    return KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        group_id=None,
        auto_offset_reset="earliest",
        bootstrap_timeout_ms=bootstrap_timeout_ms(),
        **settings,
    )


def timestamp_types(bootstrap: str, topics: list[str]) -> dict[str, str | None]:
    """Each topic's effective `message.timestamp.type` (None: the topic does not exist), by DescribeConfigs."""
    from kafka.admin import ConfigResource, KafkaAdminClient

    admin = KafkaAdminClient(
        bootstrap_servers=bootstrap, client_id="isrwatch-source", bootstrap_timeout_ms=bootstrap_timeout_ms()
    )
    try:
        found = admin.describe_configs(
            [ConfigResource("TOPIC", topic, [TIMESTAMP_TYPE]) for topic in topics], config_filter="all"
        ).get("topic", {})
    finally:
        admin.close()
    return {topic: (found.get(topic, {}).get(TIMESTAMP_TYPE) or {}).get("value") for topic in topics}


class KafkaPythonSource(DataSource):
    """Options: `bootstrap` (host:port,...), `topics` (comma-separated), `starting` (earliest|latest),
    `max_records_per_batch` (0 = everything available)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return KafkaStreamReader(dict(self.options))


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        self.bootstrap = options["bootstrap"]
        self.topics = [t for t in options["topics"].split(",") if t]
        self.starting = options.get("starting", "earliest")
        self.max_records = int(options.get("max_records_per_batch") or 0)
        self.target: Offsets | None = None

    def _offsets(self, which: str) -> Offsets:
        """Every partition's first offset (`beginning`) or high watermark (`end`), by ListOffsets; an
        unreachable broker is retried with backoff (see `retrying`)."""
        return retrying(
            self.bootstrap,
            f"reading where the topics {'begin' if which == 'beginning' else 'end'}",
            lambda: self._offsets_once(which),
        )

    def _offsets_once(self, which: str) -> Offsets:
        from kafka import TopicPartition

        consumer = _consumer(self.bootstrap)
        try:
            tps = [TopicPartition(t, p) for t in self.topics for p in sorted(consumer.partitions_for_topic(t) or ())]
            found = (consumer.beginning_offsets if which == "beginning" else consumer.end_offsets)(tps) if tps else {}
        finally:
            consumer.close()
        offsets: Offsets = {t: {} for t in self.topics}
        for tp, offset in found.items():
            offsets[tp.topic][str(tp.partition)] = offset
        return offsets

    def initialOffset(self) -> Offsets:
        return self._offsets("end" if self.starting == "latest" else "beginning")

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._offsets("end")  # what is there now; later records wait for the next run

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_records) if self.max_records > 0 else ReadAllAvailable()

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        ends = self._offsets("end")
        if self.target is not None:
            ends = {
                t: {p: min(o, self.target.get(t, {}).get(p, 0)) for p, o in parts.items()} for t, parts in ends.items()
            }
        if isinstance(limit, ReadMaxRows):
            ends = _cap(start, ends, limit.max_rows)
        return ends

    def partitions(self, start: Offsets, end: Offsets) -> list[KafkaRange]:
        ranges = []
        for topic, parts in end.items():
            for p, stop in parts.items():
                begin = start.get(topic, {}).get(p, 0)
                if stop > begin:
                    ranges.append(KafkaRange(topic, int(p), begin, stop))
        return ranges

    def read(self, partition: KafkaRange) -> Iterator[pa.RecordBatch]:
        from kafka import TopicPartition

        tp = TopicPartition(partition.topic, partition.partition)
        consumer = retrying(self.bootstrap, f"reading {tp}", lambda: _consumer(self.bootstrap, fetch_max_wait_ms=50))
        try:
            consumer.assign([tp])
            consumer.seek(tp, partition.start)
            position = partition.start
            idle_since = time.monotonic()
            while position < partition.end:
                records = consumer.poll(timeout_ms=500).get(tp, [])
                # Offsets deleted before they were read: the consumer resets to the earliest one (the driver counts
                # what is missing, SPEC §6), possibly past this range's end.
                position = max(position, consumer.position(tp, timeout_ms=500) or 0)
                if not records:
                    if time.monotonic() - idle_since > 30:  # the broker went away mid-batch: wait for it
                        print(
                            f"isrwatch: kafka-python source: no records of {tp} between offsets {position} and "
                            f"{partition.end} for 30 s from {self.bootstrap}; still waiting",
                            file=sys.stderr,
                            flush=True,
                        )
                        idle_since = time.monotonic()
                    continue
                idle_since = time.monotonic()
                rows = [r for r in records if r.offset < partition.end]
                if rows:
                    yield pa.RecordBatch.from_arrays(
                        [
                            binary_array([r.value for r in rows]),
                            pa.array([partition.topic] * len(rows), pa.string()),
                            pa.array([partition.partition] * len(rows), pa.int32()),
                            pa.array([r.offset for r in rows], pa.int64()),
                            pa.array([arrival(r.timestamp, r.timestamp_type) for r in rows], pa.int64()),
                        ],
                        schema=_ARROW,
                    )
        finally:
            consumer.close()


def arrival(timestamp: int, timestamp_type: int) -> int | None:
    """When a record reached Kafka: its timestamp if the broker set it (LogAppendTime), else unknown (SPEC §6)."""
    return timestamp if timestamp_type == LOG_APPEND_TIME and timestamp >= 0 else None


def _cap(start: Offsets, ends: Offsets, max_rows: int) -> Offsets:
    """Limit a batch to about `max_rows` records, shared across partitions in proportion to their backlog."""
    backlog = {(t, p): o - start.get(t, {}).get(p, 0) for t, parts in ends.items() for p, o in parts.items()}
    total = sum(n for n in backlog.values() if n > 0)
    if total <= max_rows:
        return ends
    capped: Offsets = {t: dict(parts) for t, parts in ends.items()}
    for (t, p), n in backlog.items():
        if n > 0:
            capped[t][p] = start.get(t, {}).get(p, 0) + max(1, n * max_rows // total)
    return capped
