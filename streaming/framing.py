"""Framing in Spark SQL: cut input into lines, read the fields the plan needs, route each line.

Only what Spark must know is read here (type, ts, cluster, topic, partition, with an explicit
schema); the full validation is `state.events.parse_event` in the stateful function, the one the
replay uses. A line with a usable time and key goes to its bucket (a tick to every bucket) with
its event time; anything else goes to the control key with no event time, so it can neither move
the watermark nor be dropped as late, and is dead-lettered there. A missing `seq` is the line
number in its file or the Kafka offset; `arrival`, the last tie-breaker, orders files by rank,
lines by number, Kafka records by partition and offset. `shared` marks a tick's copies: every
bucket applies it, the first bucket alone counts it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from state.events import DEFAULT_CLUSTER

from .buckets import CONTROL_KEY, Layout

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

# Spark drops rows at or behind its watermark before a stateful function sees them. Event times are
# shifted this far ahead, and the watermark delay with them: Spark's watermark is still newest ts -
# allowed_lateness_ms, but only rows a century late are dropped unseen; later ones reach the
# function, which dead-letters each late event with its text and reason, in its own batch.
LATE_HORIZON_MS = 100 * 365 * 86_400_000
# Spark keeps event time as microseconds in a long: later (shifted) times cannot be a timestamp.
MAX_STREAM_TS = (2**63 - 1) // 1000 - LATE_HORIZON_MS
KEY_SCHEMA = "type STRING, ts LONG, cluster STRING, topic STRING, partition INT"
PARTITION_TYPES = ("leader_and_isr", "fetch", "append")
INPUT_METRICS = "isrwatch_input"  # observed per batch: input lines (or Kafka records)


def _hash31(*cols: Column) -> Column:
    from pyspark.sql import functions as F

    return F.xxhash64(*cols).bitwiseAND(F.lit(0x7FFFFFFF))


def frame(raw: DataFrame, layout: Layout, ranks: dict[str, int] | None = None, until: int | None = None) -> DataFrame:
    """Source rows (value, origin, part, offset) to (bucket, ts, seq, arrival, raw, shared, event_time).

    `part` < 0 marks a whole file named `origin`, otherwise one Kafka record of topic `origin`.
    `ranks` orders files for the arrival tie-breaker (default: a hash of the name). With `until`
    (a replay to --until), later lines go to the control key: they must not move the watermark.
    """
    from pyspark.sql import functions as F

    is_file = F.col("part") < 0
    text = F.col("value").cast("string")
    lines = raw.select(
        "origin",
        "part",
        "offset",
        F.posexplode(F.when(is_file, F.split(text, "\n")).otherwise(F.array(text))).alias("pos", "line"),
    )
    lines = lines.where(F.col("line").rlike(r"\S")).observe(INPUT_METRICS, F.count(F.lit(1)).alias("lines"))
    line_no = F.col("pos") + 1
    rank = (
        F.element_at(F.create_map(*[F.lit(x) for kv in ranks.items() for x in kv]), F.col("origin"))
        if ranks
        else _hash31(F.col("origin"))
    )
    file_arrival = F.shiftleft(rank.cast("long"), 32).bitwiseOR(line_no)
    record_arrival = F.shiftleft(_hash31(F.concat_ws(":", "origin", "part")), 32).bitwiseOR(
        F.col("offset").bitwiseAND(F.lit(0xFFFFFFFF))
    )
    # One projection computes the JSON read once; the routing below only reads its fields.
    parsed = lines.select(
        F.when(is_file, line_no).otherwise(F.col("offset")).cast("long").alias("seq"),
        F.when(is_file, file_arrival).otherwise(record_arrival).alias("arrival"),
        F.col("line").cast("binary").alias("raw"),
        F.from_json("line", KEY_SCHEMA).alias("j"),
    )
    ts = F.col("j.ts")
    timed = ts.isNotNull() & (ts >= 0) & (ts <= MAX_STREAM_TS)
    if until is not None:
        timed = timed & (ts <= until)
    kind = F.col("j.type")
    tick = timed & (kind == "tick")
    keyed = timed & kind.isin(*PARTITION_TYPES) & F.col("j.topic").isNotNull() & (F.col("j.partition") >= 0)
    ids = list(layout.ids)
    slot = F.pmod(
        F.xxhash64(F.coalesce(F.col("j.cluster"), F.lit(DEFAULT_CLUSTER)), F.col("j.topic"), F.col("j.partition")),
        len(ids),
    )
    every = F.array(*[F.lit(b) for b in ids])
    targets = (
        F.when(tick, every)
        .when(keyed, F.array(F.element_at(every, (slot + 1).cast("int"))))
        .otherwise(F.array(F.lit(CONTROL_KEY)))
    )
    routed = parsed.select(
        F.explode(targets).alias("bucket"),
        F.when(tick | keyed, ts).alias("ts"),
        "seq",
        "arrival",
        "raw",
        tick.alias("shared"),
    )
    return routed.withColumn("event_time", F.timestamp_millis(F.col("ts") + LATE_HORIZON_MS))
