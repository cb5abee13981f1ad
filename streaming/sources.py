"""`--source` specs and the streaming DataFrames behind them, all with one row shape for the framer.

Rows are (value binary, origin string, part int, offset long): a whole file (part -1, origin = its
name) or one Kafka record (origin = topic, part = partition).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING

from isrwatch.state.config import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

KAFKA_PACKAGE = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{version('pyspark')}"
# A job that falls behind must not build ever larger micro-batches: without --max-per-batch a batch
# takes at most this much (files: bytes of input; Kafka: records), about 430,000 events.
MAX_BATCH_BYTES = 64 * 2**20
MAX_BATCH_RECORDS = 430_000
SOURCE_HELP = f"""sources (--source):
  files:DIR                       JSONL files appearing in DIR (Spark's file source; default files:./var/events).
                                  Move finished files in atomically; names starting with . or _ are ignored.
                                  A file is read whole (its line numbers are the default seq): keep files to
                                  tens of MB.
  kafka:BOOTSTRAP/TOPICS          Spark's Kafka source; needs the connector on the classpath. In a clone it
                                  is provisioned into .tools/jars/spark-kafka (python -m isrwatch.lab.jars;
                                  make test and make lab run it) and added by itself; else --spark-conf
                                  spark.jars.packages={KAFKA_PACKAGE}
                                  (or spark-submit --packages {KAFKA_PACKAGE}).
  kafka-python:BOOTSTRAP/TOPICS   a Python streaming source on kafka-python: no JVM connector needed. A
                                  Kafka that does not answer within 10 s ($ISRWATCH_KAFKA_BOOTSTRAP_TIMEOUT_MS)
                                  is said on stderr and tried again, waiting 1, 2, 5, 10, then 30 s.
  BOOTSTRAP is host:port[,host:port...], TOPICS is topic[,topic...]."""


class SourceError(ConfigError):
    """A --source that cannot be read as given; the message says what to change."""


@dataclass(frozen=True)
class Source:
    kind: str  # files | kafka | kafka-python
    location: str  # a directory, or Kafka bootstrap servers
    topics: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"{self.kind}:{self.location}" + (f"/{','.join(self.topics)}" if self.topics else "")


def parse_source(spec: str) -> Source:
    kind, sep, rest = spec.partition(":")
    if not sep or not rest:
        raise SourceError(
            f"--source {spec!r}: expected files:DIR, kafka:BOOTSTRAP/TOPICS or kafka-python:BOOTSTRAP/TOPICS"
        )
    if kind == "files":
        return Source("files", rest)
    if kind in ("kafka", "kafka-python"):
        bootstrap, sep, topics = rest.partition("/")
        names = tuple(t for t in topics.split(",") if t)
        if not sep or not bootstrap or not names:
            raise SourceError(f"--source {spec!r}: expected {kind}:HOST:PORT[,HOST:PORT]/TOPIC[,TOPIC]")
        return Source(kind, bootstrap, names)
    raise SourceError(f"--source {spec!r}: unknown source kind {kind!r} (files, kafka, kafka-python)")


def read_stream(
    spark: SparkSession, source: Source, max_per_batch: int | None = None, starting: str = "earliest"
) -> DataFrame:
    """The source as a streaming DataFrame of framing rows; `max_per_batch` = files or Kafka records.

    `received` is when a row reached isrwatch: a Kafka record's timestamp when Kafka set it
    (`message.timestamp.type=LogAppendTime`: the events topic's broker's clock); null for a CreateTime record,
    whose timestamp is the sender's clock, the very clock `ts_in_future` must not trust (SPEC §6); for files,
    the file's modification time (when it was written into the directory; the same when a batch is re-run).
    """
    from pyspark.sql import functions as F

    if source.kind == "files":
        Path(source.location).mkdir(parents=True, exist_ok=True)
        reader = spark.readStream.format("text").option("wholetext", True)
        reader = (
            reader.option("maxFilesPerTrigger", max_per_batch)
            if max_per_batch
            else reader.option("maxBytesPerTrigger", MAX_BATCH_BYTES)
        )
        df = reader.load(str(Path(source.location).resolve()))
        return df.select(
            F.col("value").cast("binary").alias("value"),
            F.col("_metadata.file_name").alias("origin"),
            F.lit(-1).alias("part"),
            F.lit(-1).cast("long").alias("offset"),
            F.unix_millis(F.col("_metadata.file_modification_time")).alias("received"),
        )
    if source.kind == "kafka":
        return _spark_kafka(spark, source, max_per_batch, starting)
    from .kafka_source import NAME, KafkaPythonSource

    spark.dataSource.register(KafkaPythonSource)
    return (
        spark.readStream.format(NAME)
        .option("bootstrap", source.location)
        .option("topics", ",".join(source.topics))
        .option("starting", starting)
        .option("max_records_per_batch", max_per_batch or MAX_BATCH_RECORDS)
        .load()
    )


def _spark_kafka(spark: SparkSession, source: Source, max_per_batch: int | None, starting: str) -> DataFrame:
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    from .kafka_source import LOG_APPEND_TIME  # Spark's `timestampType` is Kafka's TimestampType id too

    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", source.location)
        .option("subscribe", ",".join(source.topics))
        .option("startingOffsets", starting)
        .option("failOnDataLoss", "false")
    )
    reader = reader.option("maxOffsetsPerTrigger", max_per_batch or MAX_BATCH_RECORDS)
    try:
        df = reader.load()
    except AnalysisException as exc:
        if "DATA_SOURCE_NOT_FOUND" not in str(exc) and "Failed to find data source" not in str(exc):
            raise
        raise SourceError(
            f"--source {source}: Spark's Kafka connector is not on the classpath. Provision it into "
            f".tools/jars/spark-kafka (python -m isrwatch.lab.jars, which make test and make lab run), add it "
            f"with --spark-conf spark.jars.packages={KAFKA_PACKAGE} (spark-submit --packages {KAFKA_PACKAGE}), "
            f"or use --source kafka-python:{source.location}/{','.join(source.topics)}, which needs no connector."
        ) from None
    return df.select(
        "value",
        F.col("topic").alias("origin"),
        F.col("partition").alias("part"),
        "offset",
        F.when(F.col("timestampType") == LOG_APPEND_TIME, F.unix_millis("timestamp")).alias("received"),
    )


def arrival_warnings(source: Source) -> list[str]:
    """What to say at start about a Kafka source whose records do not carry their arrival: each topic that is
    not `message.timestamp.type=LogAppendTime`, with the command that fixes it (SPEC §6)."""
    if source.kind not in ("kafka", "kafka-python"):
        return []
    from kafka.errors import KafkaError

    from .kafka_source import TIMESTAMP_TYPE, timestamp_types

    try:
        types = timestamp_types(source.location, list(source.topics))
    except (KafkaError, OSError) as exc:
        return [f"could not read the {TIMESTAMP_TYPE} of {', '.join(source.topics)} ({type(exc).__name__}: {exc})"]
    return [
        f"topic {topic} does not exist yet: create it with --config {TIMESTAMP_TYPE}=LogAppendTime, or else its "
        "records' timestamps are the senders' clocks, which are not taken as arrival times"
        if kind is None
        else f"topic {topic} has {TIMESTAMP_TYPE}={kind}: its records' timestamps are the senders' clocks, so they "
        "are not taken as arrival times and its events are not checked for ts_in_future. Fix: kafka-configs "
        f"--bootstrap-server {source.location} --alter --entity-type topics --entity-name {topic} "
        f"--add-config {TIMESTAMP_TYPE}=LogAppendTime"
        for topic, kind in types.items()
        if kind != "LogAppendTime"
    ]
