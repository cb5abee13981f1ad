"""The streaming shell without Spark: the real state function called under Spark's calling rules.

Like bytewax's testing harness, this runs a stateful operator without its cluster runtime, so
property tests can try thousands of micro-batch cuts at Python speed. What it reproduces of
`applyInPandasWithState` without timeouts (PySpark 4.x): in each micro-batch every key with rows is
called once with its rows, in no particular order (here: reversed, the least convenient), its state
round-tripping through bytes between calls. The framing is a
Python twin of `streaming.framing` (the same routing rules and roles; another hash: which bucket
holds a partition does not change outputs). The Spark parity tests remain the final judge.
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Iterable, Iterator

import msgspec
import pandas as pd

from state.config import Config
from state.events import DEFAULT_CLUSTER
from state.replay import ReplayResult

from .buckets import CONTROL_KEY
from .collect import ReplayCollector
from .framing import BEACON_EVERY, BROKER_TYPES, PARTITION_TYPES, Role
from .reports import Line, decode_report
from .stateful import state_function


class FakeGroupState:
    """The part of Spark's `GroupState` the state function uses."""

    def __init__(self, blob: bytes | None) -> None:
        self._blob = blob

    @property
    def exists(self) -> bool:
        return self._blob is not None

    @property
    def get(self) -> tuple[bytes]:
        if self._blob is None:
            raise ValueError("state does not exist")
        return (self._blob,)

    def update(self, value: tuple[bytes]) -> None:
        self._blob = value[0]


def route(raw: bytes, number: int, buckets: list[int], received: int | None = None) -> list[tuple[int, Line]]:
    """(bucket, line) for each state key a line goes to, as `streaming.framing.frame` routes it: a tick to every
    bucket, a partition event to its own (and, one in `BEACON_EVERY`, as a beacon to every other), a broker's
    event about many partitions to the first, anything without a usable time or key to the control key."""
    try:
        obj = msgspec.json.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        obj = None
    fields = obj if isinstance(obj, dict) else {}
    ts, kind, topic, partition = fields.get("ts"), fields.get("type"), fields.get("topic"), fields.get("partition")
    timed = type(ts) is int and 0 <= ts < 2**63
    if timed and kind == "tick":
        return [(b, Line(ts, number, number, raw, Role.TICK, received)) for b in buckets]
    if timed and kind in BROKER_TYPES:
        return [(buckets[0], Line(ts, number, number, raw, Role.EVENT, received))]
    if timed and kind in PARTITION_TYPES and type(topic) is str and type(partition) is int and partition >= 0:
        cluster = fields.get("cluster")
        key = f"{cluster if isinstance(cluster, str) else DEFAULT_CLUSTER}\0{topic}\0{partition}".encode()
        own = buckets[zlib.crc32(key) % len(buckets)]
        targets = buckets if number % BEACON_EVERY == 1 else [own]
        return [(b, Line(ts, number, number, raw, Role.EVENT if b == own else Role.BEACON, received)) for b in targets]
    return [(CONTROL_KEY, Line(None, number, number, raw, Role.EVENT, received))]


def _frames(lines: list[Line]) -> Iterator[pd.DataFrame]:
    if lines:
        yield pd.DataFrame(
            {
                "ts": pd.array([line.ts for line in lines], dtype="Int64"),
                "seq": [line.seq for line in lines],
                "arrival": [line.arrival for line in lines],
                "raw": [line.raw for line in lines],
                "role": [line.role for line in lines],
                "received": pd.array([line.received for line in lines], dtype="Int64"),
            }
        )


def run_stateful(
    lines: Iterable[bytes],
    cuts: Iterable[int],
    config: Config,
    buckets: int = 4,
    until: int | None = None,
    received: int | None = None,
) -> ReplayResult:
    """Feed `lines` (seq = position, 1-based) to the real state function in micro-batches cut before each index in
    `cuts`, then finish at `until` as `isrwatch replay --engine spark` does. `received`: when every line
    arrived (None: trust the events' times)."""
    raw_lines = list(lines)
    bucket_ids = list(range(buckets))
    step = state_function(config, bucket_ids, until, keep_blobs=True)
    collector = ReplayCollector(config, bucket_ids[0])
    blobs: dict[int, bytes] = {}
    start = 0
    for end in sorted({c for c in cuts if 0 < c < len(raw_lines)} | {len(raw_lines)}):
        batch: dict[int, list[Line]] = defaultdict(list)
        for number in range(start + 1, end + 1):
            for bucket, line in route(raw_lines[number - 1], number, bucket_ids, received):
                batch[bucket].append(line)
        start = end
        reports = []
        for key in sorted(batch):
            state = FakeGroupState(blobs.get(key))
            for frame in step((key,), _frames(batch[key][::-1]), state):
                reports.extend(decode_report(b) for b in frame["report"])
            if state.exists:
                blobs[key] = state.get[0]
        collector.add(reports)
    return collector.finish(until)
