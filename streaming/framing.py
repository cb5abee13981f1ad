"""Framing, in Python before the shuffle: cut input into lines, route each line, pack each state key's lines.

Only what routing needs is read here (type, ts, cluster, topic, partition); the full validation is
`state.events.parse_event` in the stateful function, the one the replay uses. A partition event goes
to its partition's bucket; a tick, which every partition of its cluster obeys, to every bucket; a
broker's `isr_change_propagated` to the first bucket; anything without a usable time or key to the
control key, which dead-letters it. A missing `seq` is the line number in its file or the Kafka
offset; `arrival`, the last tie-breaker, orders files by rank, lines by number, Kafka records by
partition and offset. `received` is when the line reached isrwatch (the Kafka record's timestamp,
else the file's modification time): an event dated far beyond it is refused (`max_future_ms`).

Event time is kept per cluster by the buckets themselves (SPEC §6), not by a Spark watermark: a
bucket knows a cluster's time from the events it receives. So that a bucket whose own partitions
are quiet still learns how far its cluster has come, one partition event in `BEACON_EVERY` (by seq),
and the last line of every file, is also copied to every other bucket as a *beacon*, which only moves
that bucket's knowledge of the cluster's time (ticks, copied to every bucket anyway, do the same).

Why Python and not Spark SQL: the lines a map task sends one key travel as one packed row (`Routed`),
so the JVM shuffles, sorts and converts a few rows per task instead of one per event (issue 14: the
per-line JVM work was two thirds of the stream's cost).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from enum import IntEnum
from functools import partial
from typing import TYPE_CHECKING, NamedTuple

import msgspec
import pyarrow as pa

from state.events import DEFAULT_CLUSTER

from .buckets import CONTROL_KEY, Layout

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

PARTITION_TYPES = frozenset(("leader_and_isr", "fetch", "append", "isr_updated"))
BROKER_TYPES = frozenset(("isr_change_propagated",))  # a broker's event about many partitions: the first bucket
INPUT_METRICS = "isrwatch_input"  # observed per batch: input lines (or Kafka records)
WHITESPACE = b" \t\n\x0b\f\r"  # what Java's regex `\s` matches: a line of nothing else is no input
BOM = b"\xef\xbb\xbf"
BEACON_EVERY = 256  # one partition event in this many (by seq) also tells every bucket its cluster's time
MAX_TS = 2**63 - 1
FRAMED_SCHEMA = "bucket int, lines long, data binary"
_FRAMED = pa.schema([("bucket", pa.int32()), ("lines", pa.int64()), ("data", pa.binary())])


class Role(IntEnum):
    """What a routed line is to the bucket that receives it."""

    EVENT = 0  # its own partition event (or a control line)
    TICK = 1  # a tick: every bucket applies it, the first bucket alone counts it
    BEACON = 2  # another bucket's event: it only tells how far its cluster's time has come


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
    seq: list[int]  # the seq to use when the event carries none: the line number or Kafka offset
    arrival: list[int]  # the last tie-breaker: input position
    received: list[int | None]  # when it reached isrwatch (epoch ms); None: trust its time (a replay without --now)
    last: list[bool]  # a file's last line: a beacon whatever its seq

    @classmethod
    def empty(cls) -> Lines:
        return cls([], [], [], [], [])

    def add(self, value: bytes, origin: str, part: int, offset: int, received: int | None, rank: int) -> None:
        """A source row's non-blank lines: a whole file (`part` < 0, cut at newlines, numbered from 1) or one
        Kafka record of topic `origin`. `rank` orders files for the arrival tie-breaker."""
        if part >= 0:
            if value.strip(WHITESPACE):
                self.raw.append(value)
                self.seq.append(offset)
                self.arrival.append((hash31(f"{origin}:{part}") << 32) | (offset & 0xFFFFFFFF))
                self.received.append(received)
                self.last.append(False)
            return
        cut = value.split(b"\n")
        numbers = [n for n, raw in enumerate(cut, 1) if raw.strip(WHITESPACE)]
        self.raw.extend(cut[n - 1] for n in numbers)
        self.seq.extend(numbers)
        high = rank << 32
        self.arrival.extend(high | n for n in numbers)
        self.received.extend([received] * len(numbers))
        final = len(cut) - 1  # the number of the last line before the file's final newline (or the last line)
        self.last.extend(n >= final for n in numbers)


class Routed(msgspec.Struct, array_like=True):
    """The lines one map task sends one state key, column by column (one shuffled row)."""

    raw: list[bytes]
    seq: list[int]
    arrival: list[int]
    role: bytes  # a `Role` per line
    received: list[int | None]


_routing = msgspec.json.Decoder(Routing)
_encoder = msgspec.msgpack.Encoder()
_routed = msgspec.msgpack.Decoder(Routed)
_TICK = -2  # a broadcast line that is a tick (else the broadcast line's own bucket)


def hash31(text: str) -> int:
    """A stable non-negative 31-bit hash (CRC-32): the same in every process and release of Python."""
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


def _read(raw: bytes) -> Routing | None:
    try:
        return _routing.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, RecursionError):
        if raw.startswith(BOM):  # a byte-order mark is no data (the line keeps it)
            return _read(raw[len(BOM) :])
        return None


def route(lines: Lines, ids: list[int], until: int | None = None) -> dict[int, Routed]:
    """Each state key's lines. With `until` (a replay to --until), later lines go to the control key:
    nothing after --until may be applied. Within a key, lines need no order: the key sorts what it applies."""
    count = len(ids)
    first = ids[0]
    own_of: dict[tuple[str | None, str, int], int] = {}
    single: dict[int, list[int]] = {}  # key -> lines it alone receives (its own events, or control)
    broadcast: list[tuple[int, int]] = []  # (line, its own key or _TICK): lines every key receives
    seqs, lasts = lines.seq, lines.last
    for i, raw in enumerate(lines.raw):
        key = _read(raw)
        to = CONTROL_KEY
        if key is None or key.ts is None or not 0 <= key.ts <= MAX_TS or (until is not None and key.ts > until):
            pass
        elif key.type == "tick":
            broadcast.append((i, _TICK))
            continue
        elif key.type in BROKER_TYPES:
            to = first
        elif key.type in PARTITION_TYPES and key.topic is not None and key.partition is not None and key.partition >= 0:
            name = (key.cluster, key.topic, key.partition)
            to = own_of.get(name, CONTROL_KEY)
            if to == CONTROL_KEY:
                cluster = DEFAULT_CLUSTER if key.cluster is None else key.cluster
                to = own_of[name] = ids[zlib.crc32(f"{cluster}\0{key.topic}\0{key.partition}".encode()) % count]
            if seqs[i] % BEACON_EVERY == 1 or lasts[i]:
                broadcast.append((i, to))
                continue
        single.setdefault(to, []).append(i)
    out: dict[int, Routed] = {}
    for bucket in set(single) | (set(ids) if broadcast else set()):
        mine = single.get(bucket, [])
        every = [i for i, _ in broadcast]
        roles = bytes(len(mine)) + bytes(
            Role.TICK if own == _TICK else Role.EVENT if own == bucket else Role.BEACON for _, own in broadcast
        )
        at = mine + every
        out[bucket] = Routed(
            [lines.raw[i] for i in at],
            [seqs[i] for i in at],
            [lines.arrival[i] for i in at],
            roles,
            [lines.received[i] for i in at],
        )
    return out


def frame_batches(
    batches: Iterator[pa.RecordBatch], ids: list[int], ranks: dict[str, int] | None, until: int | None
) -> Iterator[pa.RecordBatch]:
    """The `mapInArrow` function: source rows (value, origin, part, offset, received) to packed rows (bucket,
    lines, data); `lines` counts the input lines once (on the first row of each source batch)."""
    for batch in batches:
        lines = Lines.empty()
        for value, origin, part, offset, received in zip(*batch.to_pydict().values(), strict=True):
            if value is not None:  # a Kafka tombstone is no input
                lines.add(value, origin, part, offset, received, ranks[origin] if ranks else hash31(origin))
        routed = route(lines, ids, until)
        if routed:
            buckets = sorted(routed)
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array(buckets, pa.int32()),
                    pa.array([len(lines.raw)] + [0] * (len(buckets) - 1), pa.int64()),
                    pa.array([pack(routed[b]) for b in buckets], pa.binary()),
                ],
                schema=_FRAMED,
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
    return framed.observe(INPUT_METRICS, F.sum("lines").alias("lines")).select("bucket", "data")
