"""Framing, in Python before the shuffle: cut input into lines, route each line, pack each state key's lines.

Only what routing needs is read here (type, ts, cluster, topic, partition); the full validation is
`isrwatch.state.events.parse_event` in the stateful function, the one the replay uses. A partition event goes
to its partition's bucket; a tick, which every partition of its cluster obeys, to every bucket; a
broker's `isr_change_propagated` to the first bucket; anything without a usable time or key to the
control key, which dead-letters it. A missing `seq` is the line number in its file or the Kafka
offset; `arrival`, the last tie-breaker, orders files by rank, lines by number, Kafka records by
partition and offset. `received` is when the line reached isrwatch (the Kafka record's timestamp,
else the file's modification time): an event dated far beyond it is refused (`max_future_ms`).

Event time is kept per cluster by the buckets themselves (SPEC §6), not by a Spark watermark: a
bucket knows a cluster's time from the events it receives. So that a bucket whose own partitions
are quiet still learns how far its cluster has come, the last line of every file and of every Kafka
partition's records in a source batch, and one partition event in `beacon_every` (by seq), is also
copied to every other bucket as a *beacon*, which only moves that bucket's knowledge of the cluster's
time (ticks, copied to every bucket anyway, do the same). The sampled beacons are one in
`BEACON_SHARE` x the bucket count: each event costs 1/`BEACON_SHARE` of a copy whatever the number of
buckets, and each bucket gets at least one line per source batch whatever the number of events.

Why Python and not Spark SQL: the lines a map task sends one key travel as one packed row (`Routed`),
so the JVM shuffles, sorts and converts a few rows per task instead of one per event, which was most of
the stream's cost (deploy/README.md, "Sizing the stream").
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from enum import IntEnum
from functools import partial
from typing import TYPE_CHECKING, NamedTuple

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from isrwatch.state.events import DEFAULT_CLUSTER
from isrwatch.state.eventtime import Role  # the shell routes each line as the core reads it

from .buckets import CONTROL_KEY, Layout

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

PARTITION_TYPES = frozenset(("leader_and_isr", "fetch", "append", "isr_updated", "alter_partition_response"))
# Every key obeys them (a registration: its eligibility; a request: its partitions' proposals, for the audit; a
# watermark: how far its broker's stream has come, SPEC §6).
SPREAD_TYPES = frozenset(("tick", "broker_registration", "alter_partition_sent", "watermark"))
BROKER_TYPES = frozenset(("isr_change_propagated",))  # a broker's event about many partitions: the first bucket
INPUT_METRICS = "isrwatch_input"  # observed per batch: input lines, and what was read of each Kafka partition
# A line of nothing but whitespace (b" \t\n\x0b\f\r", exactly what bytes.isspace() accepts) is no input.
BOM = b"\xef\xbb\xbf"
BEACON_SHARE = 16  # one partition event in this many x the bucket count (by seq) tells every bucket its cluster's time
MAX_TS = 2**63 - 1
FRAMED_SCHEMA = "bucket int, lines long, data binary, read string"
_FRAMED = pa.schema([("bucket", pa.int32()), ("lines", pa.int64()), ("data", pa.binary()), ("read", pa.string())])


class Destination(IntEnum):
    """Where a line goes: the state keys it is routed to follow from this, never from a key id."""

    OWN = 0  # a partition event: its partition's bucket (and, a beacon, every other bucket)
    EVERY_KEY = 1  # a tick: every bucket; the first bucket counts it
    FIRST_KEY = 2  # a broker's event about many partitions: the first bucket
    CONTROL = 3  # no usable time or key (or after --until): the control key, which dead-letters it


class Routing(msgspec.Struct, gc=False):
    """The fields routing reads; any type mismatch sends the line to the control key, which says why."""

    type: str | None = None
    ts: int | None = None
    cluster: str | None = None
    topic: str | None = None
    partition: int | None = None


class Lines(NamedTuple):
    """Input lines column by column: what a map task's source batch holds."""

    raw: list[bytes]
    seq: np.ndarray  # int64: the seq to use when the event carries none: the line number or Kafka offset
    arrival: np.ndarray  # int64: the last tie-breaker, input position
    received: np.ndarray  # int64: when it reached isrwatch (epoch ms); NOT_RECEIVED: trust its time
    last: np.ndarray  # bool: a file's last line, or a Kafka partition's last record here: a beacon whatever its seq

    @classmethod
    def of_file(cls, value: bytes, received: int, rank: int) -> Lines:
        """A whole file's non-blank lines, numbered from 1 (the number is the seq); `rank` orders files for the
        arrival tie-breaker."""
        cut = value.split(b"\n")
        if all(cut[:-1]) and not any(map(bytes.isspace, cut)):  # no blank line (but after the final newline)
            raws = cut if cut[-1] else cut[:-1]
            numbers = np.arange(1, len(raws) + 1, dtype=np.int64)
        else:
            kept = [n for n, raw in enumerate(cut, 1) if raw and not raw.isspace()]
            raws = [cut[n - 1] for n in kept]
            numbers = np.array(kept, dtype=np.int64)
        return cls(
            raws,
            numbers,
            numbers | (rank << 32),
            np.full(len(raws), received, dtype=np.int64),
            np.arange(len(raws)) == len(raws) - 1,  # the file's last line (blank ones are no lines)
        )

    @classmethod
    def of_records(cls, batch: pa.RecordBatch) -> Lines:
        """Kafka records of topic `origin`, partition `part`: the offset is the seq."""
        values = batch.column("value").to_pylist()
        kept = [i for i, value in enumerate(values) if value and not value.isspace()]  # None: a tombstone
        rows = batch.take(pa.array(kept, pa.int64()))
        offsets = rows.column("offset").to_numpy(zero_copy_only=False).astype(np.int64)
        origins = [
            f"{o}:{p}" for o, p in zip(rows.column("origin").to_pylist(), rows.column("part").to_pylist(), strict=True)
        ]
        ranks = {name: hash31(name) for name in set(origins)}  # a batch holds a few Kafka partitions: hash each once
        rank = np.array([ranks[name] for name in origins], dtype=np.int64)
        return cls(
            [values[i] for i in kept],
            offsets,
            (rank << 32) | (offsets & 0xFFFFFFFF),
            _received(rows.column("received")),
            np.append(rank[1:] != rank[:-1], True) if len(kept) else np.zeros(0, dtype=bool),
        )


class Routed(msgspec.Struct, array_like=True):
    """The lines one map task sends one state key, column by column (one shuffled row): int64 columns as bytes."""

    raw: list[bytes]
    seq: bytes
    arrival: bytes
    role: bytes  # a `Role` per line
    received: bytes

    def lines(self) -> Iterator[tuple[bytes, int, int, int, int | None]]:
        """(raw, seq, arrival, role, received) per line."""
        at = np.frombuffer(self.received, np.int64)
        missing = at == NOT_RECEIVED
        received = (
            at.tolist() if not missing.any() else [None if m else a for m, a in zip(missing, at.tolist(), strict=True)]
        )
        return zip(
            self.raw,
            np.frombuffer(self.seq, np.int64).tolist(),
            np.frombuffer(self.arrival, np.int64).tolist(),
            self.role,
            received,
            strict=True,
        )


_routing = msgspec.json.Decoder(Routing)
_encoder = msgspec.msgpack.Encoder()
_routed = msgspec.msgpack.Decoder(Routed)
NOT_RECEIVED = -1


def hash31(text: str) -> int:
    """A stable non-negative 31-bit hash (CRC-32): the same in every process and release of Python."""
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


def _received(column: pa.Array) -> np.ndarray:
    return column.cast(pa.int64()).fill_null(NOT_RECEIVED).to_numpy(zero_copy_only=False)


def _read(raw: bytes) -> Routing | None:
    try:
        return _routing.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, RecursionError):
        if raw.startswith(BOM):  # a byte-order mark is no data (the line keeps it)
            return _read(raw[len(BOM) :])
        return None


def _keys(raws: list[bytes]) -> list[Routing | None]:
    decode = _routing.decode
    try:
        return [decode(raw) for raw in raws]
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, RecursionError):
        return [_read(raw) for raw in raws]  # some line is not routable: find which, one by one


def _destinations(keys: list[Routing | None], ids: list[int], until: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Per line: its `Destination`, and the state key that counts it (a partition event's own bucket, the first
    bucket for a tick or a broker's event, the control key)."""
    count = len(ids)
    limit = MAX_TS if until is None else until
    own_of: dict[tuple[str | None, str, int], int] = {}
    to_own, to_every, to_first = int(Destination.OWN), int(Destination.EVERY_KEY), int(Destination.FIRST_KEY)  # ints:
    kinds = [int(Destination.CONTROL)] * len(keys)  # numpy converts a list of enum members slowly
    dest = [CONTROL_KEY] * len(keys)
    for i, key in enumerate(keys):
        if key is None or key.ts is None or not 0 <= key.ts <= limit:
            continue
        kind = key.type
        if kind in PARTITION_TYPES:
            topic, partition = key.topic, key.partition
            if topic is None or partition is None or partition < 0:
                continue
            name = (key.cluster, topic, partition)
            own = own_of.get(name)
            if own is None:
                cluster = DEFAULT_CLUSTER if key.cluster is None else key.cluster
                own = own_of[name] = ids[zlib.crc32(f"{cluster}\0{topic}\0{partition}".encode()) % count]
            kinds[i], dest[i] = to_own, own
        elif kind in SPREAD_TYPES:
            kinds[i], dest[i] = to_every, ids[0]
        elif kind in BROKER_TYPES:
            kinds[i], dest[i] = to_first, ids[0]
    return np.array(kinds, dtype=np.uint8), np.array(dest, dtype=np.int64)


def beacon_every(buckets: int) -> int:
    """One partition event in this many (by seq) is a beacon: `BEACON_SHARE` x the bucket count."""
    return BEACON_SHARE * buckets


def route(lines: Lines, ids: list[int], until: int | None = None) -> dict[int, Routed]:
    """Each state key's lines. With `until` (a replay to --until), later lines go to the control key:
    nothing after --until may be applied. Within a key, lines need no order: the key sorts what it applies."""
    kinds, dest = _destinations(_keys(lines.raw), ids, until)
    every = kinds == Destination.EVERY_KEY
    beacon = (kinds == Destination.OWN) & ((lines.seq % beacon_every(len(ids)) == 1) | lines.last)
    spreading = beacon | every  # lines every key receives
    spread = np.flatnonzero(spreading)
    raws = np.empty(len(lines.raw), dtype=object)
    raws[:] = lines.raw
    alone = ~spreading
    out: dict[int, Routed] = {}
    for bucket in [*ids, CONTROL_KEY] if len(spread) else np.unique(dest).tolist():
        mine = np.flatnonzero(alone & (dest == bucket))
        at = np.concatenate([mine, spread]) if len(spread) and bucket != CONTROL_KEY else mine
        if not len(at):
            continue
        roles = np.zeros(len(at), dtype=np.uint8)  # Role.EVENT
        if len(at) > len(mine):
            roles[len(mine) :] = np.where(
                every[spread], Role.TICK, np.where(dest[spread] == bucket, Role.EVENT, Role.BEACON)
            )
        out[bucket] = Routed(
            raws[at].tolist(),
            lines.seq[at].tobytes(),
            lines.arrival[at].tobytes(),
            roles.tobytes(),
            lines.received[at].tobytes(),
        )
    return out


def lines_of(batch: pa.RecordBatch, ranks: dict[str, int] | None) -> Iterator[Lines]:
    """A source batch's lines: each whole file's (`part` < 0, named `origin`) on its own, then the Kafka records'
    (topic `origin`). A file at a time: routing a few files' lines at once costs a third more per line."""
    files = pc.less(batch.column("part"), 0)
    if pc.any(files).as_py():
        chosen = batch.filter(files)
        received = _received(chosen.column("received")).tolist()
        for value, origin, at in zip(
            chosen.column("value").to_pylist(), chosen.column("origin").to_pylist(), received, strict=True
        ):
            yield Lines.of_file(value, at, ranks[origin] if ranks else hash31(origin))
    if not pc.all(files).as_py():
        yield Lines.of_records(batch.filter(pc.invert(files)))


def kafka_read(batch: pa.RecordBatch) -> list[str]:
    """What a source batch read of each Kafka partition, as `topic:partition:records:first offset` (tombstones
    and unreadable records included): the driver compares it with the micro-batch's offset range, and the
    offsets it planned but nobody read were lost (SPEC §6)."""
    low, high = (bound.as_py() for bound in pc.min_max(batch.column("part")).values())
    if low >= 0 and low == high and pc.count_distinct(batch.column("origin")).as_py() == 1:
        # One Kafka partition, as a Spark task's batches are: a third of the grouping's cost.
        return [f"{batch.column('origin')[0]}:{low}:{batch.num_rows}:{pc.min(batch.column('offset'))}"]
    records = batch.filter(pc.greater_equal(batch.column("part"), 0))
    if not records.num_rows:
        return []
    table = pa.Table.from_batches([records]).group_by(["origin", "part"], use_threads=False)
    counts = table.aggregate([("offset", "count"), ("offset", "min")])
    return [
        f"{topic}:{part}:{count}:{first}"
        for topic, part, count, first in zip(
            *(counts.column(name).to_pylist() for name in ("origin", "part", "offset_count", "offset_min")),
            strict=True,
        )
    ]


def frame_batches(
    batches: Iterator[pa.RecordBatch], ids: list[int], ranks: dict[str, int] | None, until: int | None
) -> Iterator[pa.RecordBatch]:
    """The `mapInArrow` function: source rows (value, origin, part, offset, received) to packed rows (bucket,
    lines, data); `lines` counts the input lines once (on the first row of each file or of the records). Each
    source batch's `kafka_read` summaries travel on rows of their own (no data), for the observed metrics."""
    for batch in batches:
        if not batch.num_rows:
            continue
        read = kafka_read(batch)
        if read:
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array([CONTROL_KEY] * len(read), pa.int32()),
                    pa.array([0] * len(read), pa.int64()),
                    pa.nulls(len(read), pa.binary()),
                    pa.array(read, pa.string()),
                ],
                schema=_FRAMED,
            )
        for lines in lines_of(batch, ranks):
            routed = route(lines, ids, until)
            if routed:
                buckets = sorted(routed)
                yield pa.RecordBatch.from_arrays(
                    [
                        pa.array(buckets, pa.int32()),
                        pa.array([len(lines.raw)] + [0] * (len(buckets) - 1), pa.int64()),
                        binary_array([pack(routed[b]) for b in buckets]),
                        pa.nulls(len(buckets), pa.string()),
                    ],
                    schema=_FRAMED,
                )


def binary_array(values: list[bytes | None]) -> pa.Array:
    """An Arrow binary array of `values` (None: null), built from one joined buffer: `pa.array(values, pa.binary())`
    grows its buffer value by value, several times slower for Kafka records (docs/performance.md)."""
    nulls = [v is None for v in values]
    null_count = sum(nulls)
    present = [b"" if v is None else v for v in values] if null_count else values
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, present), dtype=np.int64, count=len(values)), out=offsets[1:])
    if offsets[-1] > np.iinfo(np.int32).max:  # Spark's Arrow reader takes binary (int32 offsets), not large_binary
        raise ValueError(f"{offsets[-1]:,} bytes in one Arrow batch: over binary's 2 GiB")
    validity = pa.py_buffer(np.packbits(~np.array(nulls), bitorder="little")) if null_count else None
    return pa.Array.from_buffers(
        pa.binary(),
        len(values),
        [validity, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(b"".join(present))],
        null_count=null_count,
    )


def unpack(data: bytes) -> Routed:
    return _routed.decode(data)


def pack(routed: Routed) -> bytes:
    return _encoder.encode(routed)


def frame(raw: DataFrame, layout: Layout, ranks: dict[str, int] | None = None, until: int | None = None) -> DataFrame:
    """Source rows (value, origin, part, offset, received) to (bucket, data): one packed `Routed` per map task,
    input batch and state key. `ranks` orders files for the arrival tie-breaker (default: a hash of the name)."""
    from pyspark.sql import functions as F

    framed = raw.mapInArrow(partial(frame_batches, ids=list(layout.ids), ranks=ranks, until=until), FRAMED_SCHEMA)
    observed = framed.observe(INPUT_METRICS, F.sum("lines").alias("lines"), F.collect_list("read").alias("read"))
    return observed.where(F.col("data").isNotNull()).select("bucket", "data")
