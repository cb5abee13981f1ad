"""Framing in Spark SQL: cut input into lines, read the fields the plan needs, route each line.

Only what routing needs is read here (type, ts, cluster, topic, partition, with an explicit
schema); the full validation is `state.events.parse_event` in the stateful function, the one the
replay uses. A partition event goes to its partition's bucket; a tick, which every partition of
its cluster obeys, to every bucket; a broker's `isr_change_propagated` to the first bucket;
anything without a usable time or key to the control key, which dead-letters it. A missing `seq`
is the line number in its file or the Kafka offset; `arrival`, the last tie-breaker, orders files
by rank, lines by number, Kafka records by partition and offset. `received` is when the line
reached isrwatch (the Kafka record's timestamp, else the file's modification time): an event dated
far beyond it is refused (`max_future_ms`).

Event time is kept per cluster by the buckets themselves (SPEC §6), not by a Spark watermark: a
bucket knows a cluster's time from the events it receives. So that a bucket whose own partitions
are quiet still learns how far its cluster has come, one partition event in `BEACON_EVERY` (by seq),
and the last line of every file, is also copied to every other bucket as a *beacon*, which only moves
that bucket's knowledge of the cluster's time (ticks, copied to every bucket anyway, do the same).
"""

from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING

from state.events import DEFAULT_CLUSTER

from .buckets import CONTROL_KEY, Layout

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

KEY_SCHEMA = "type STRING, ts LONG, cluster STRING, topic STRING, partition INT"
PARTITION_TYPES = ("leader_and_isr", "fetch", "append", "isr_updated")
BROKER_TYPES = ("isr_change_propagated",)  # a broker's event about many partitions: the first bucket keeps it
INPUT_METRICS = "isrwatch_input"  # observed per batch: input lines (or Kafka records)
WHITESPACE = " \t\n\x0b\f\r"  # what Java's regex `\s` matches
BOM = "\ufeff"
BEACON_EVERY = 256  # one partition event in this many (by seq) also tells every bucket its cluster's time


class Role(IntEnum):
    """What a routed line is to the bucket that receives it."""

    EVENT = 0  # its own partition event (or a control line)
    TICK = 1  # a tick: every bucket applies it, the first bucket alone counts it
    BEACON = 2  # another bucket's event: it only tells how far its cluster's time has come


def _hash31(*cols: Column) -> Column:
    from pyspark.sql import functions as F

    return F.xxhash64(*cols).bitwiseAND(F.lit(0x7FFFFFFF))


def frame(raw: DataFrame, layout: Layout, ranks: dict[str, int] | None = None, until: int | None = None) -> DataFrame:
    """Source rows (value, origin, part, offset, received) to (bucket, ts, seq, arrival, raw, role, received).

    `part` < 0 marks a whole file named `origin`, otherwise one Kafka record of topic `origin`.
    `ranks` orders files for the arrival tie-breaker (default: a hash of the name). With `until`
    (a replay to --until), later lines go to the control key: nothing after --until may be applied.
    """
    from pyspark.sql import functions as F

    is_file = F.col("part") < 0
    text = F.col("value").cast("string")
    split = F.when(is_file, F.split(text, "\n")).otherwise(F.array(text))
    # The file is cut once, before the generator: an expression of `value` beside it would be evaluated again
    # for every line it yields (quadratic in the file's size).
    cut = raw.select("origin", "part", "offset", "received", split.alias("lines"))
    cut = cut.select("origin", "part", "offset", "received", F.size("lines").alias("count"), "lines")
    lines = cut.select("origin", "part", "offset", "received", "count", F.posexplode("lines").alias("pos", "line"))
    # A line of nothing but whitespace (Java regex `\s`) is no input. trim and startswith below read the bytes where
    # a regex would first decode each line to a Java String.
    line = F.col("line")
    lines = lines.where(F.length(F.trim(line, F.lit(WHITESPACE))) > 0).observe(
        INPUT_METRICS, F.count(F.lit(1)).alias("lines")
    )
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
    unmarked = F.when(line.startswith(BOM), line.substr(F.lit(2), F.length(line))).otherwise(line)  # a BOM is no data
    # One projection computes the JSON read once; the routing below only reads its fields.
    parsed = lines.select(
        F.when(is_file, line_no).otherwise(F.col("offset")).cast("long").alias("seq"),
        F.when(is_file, file_arrival).otherwise(record_arrival).alias("arrival"),
        F.col("line").cast("binary").alias("raw"),
        "received",
        (is_file & (F.col("pos") >= F.col("count") - 2)).alias("last"),  # a file's last line (before its newline)
        F.from_json(unmarked, KEY_SCHEMA).alias("j"),
    )
    ts = F.col("j.ts")
    timed = ts.isNotNull() & (ts >= 0)
    if until is not None:
        timed = timed & (ts <= until)
    kind = F.col("j.type")
    tick = timed & (kind == "tick")
    keyed = timed & kind.isin(*PARTITION_TYPES) & F.col("j.topic").isNotNull() & (F.col("j.partition") >= 0)
    by_broker = timed & kind.isin(*BROKER_TYPES)
    ids = list(layout.ids)
    slot = F.pmod(
        F.xxhash64(F.coalesce(F.col("j.cluster"), F.lit(DEFAULT_CLUSTER)), F.col("j.topic"), F.col("j.partition")),
        len(ids),
    )
    every = F.array(*[F.lit(b) for b in ids])
    own = F.when(by_broker, F.lit(ids[0])).otherwise(F.element_at(every, (slot + 1).cast("int")))
    beacon = keyed & ((F.pmod(F.col("seq"), F.lit(BEACON_EVERY)) == 1) | F.col("last"))
    targets = F.when(tick | beacon, every).when(keyed | by_broker, F.array(own)).otherwise(F.array(F.lit(CONTROL_KEY)))
    routed = parsed.select(
        F.explode(targets).alias("bucket"),
        F.when(tick | keyed | by_broker, ts).alias("ts"),
        "seq",
        "arrival",
        "raw",
        "received",
        tick.alias("tick"),
        own.alias("own"),
    )
    role = (
        F.when(F.col("tick"), F.lit(int(Role.TICK)))
        .when(F.col("bucket") == F.col("own"), F.lit(int(Role.EVENT)))
        .when(F.col("bucket") == F.lit(CONTROL_KEY), F.lit(int(Role.EVENT)))
        .otherwise(F.lit(int(Role.BEACON)))
    )
    return routed.select("bucket", "ts", "seq", "arrival", "raw", role.cast("tinyint").alias("role"), "received")
