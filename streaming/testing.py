"""The streaming shell without Spark: the real state function called under Spark's calling rules.

Like bytewax's testing harness, this runs a stateful operator without its cluster runtime, so
property tests can try thousands of micro-batch cuts at Python speed. What it reproduces of
`applyInPandasWithState` with an event-time timeout (PySpark 4.x):
- the watermark a batch sees is the newest event time of the batches before it minus the delay
  (`allowed_lateness_ms`), 0 before any; it never goes back;
- a key is called when its batch has rows for it, or when its timeout is strictly behind the
  watermark (then with no rows), its state round-tripping through bytes between calls;
- after a batch that moved the watermark, a no-data batch runs with the new watermark;
- `setTimeoutTimestamp` below the current watermark is refused, as Spark refuses it.
The framing is a Python twin of `streaming.framing` (same routing rules, a different hash: which
bucket holds a partition does not change outputs). The Spark parity tests remain the final judge.
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
from .framing import MAX_STREAM_TS, PARTITION_TYPES
from .reports import Line, Report, decode_report
from .stateful import StateFunction, state_function


class FakeGroupState:
    """The part of Spark's `GroupState` the state function uses."""

    def __init__(self, blob: bytes | None, watermark: int, timed_out: bool) -> None:
        self._blob = blob
        self._watermark = watermark
        self.hasTimedOut = timed_out
        self.timeout: int | None = None

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

    def setTimeoutTimestamp(self, ms: int) -> None:  # noqa: N802 - Spark's name
        if ms < self._watermark:
            raise ValueError(f"timeout {ms} is behind the watermark {self._watermark}")
        self.timeout = ms

    def getCurrentWatermarkMs(self) -> int:  # noqa: N802 - Spark's name
        return self._watermark


def route(raw: bytes, number: int, buckets: list[int]) -> list[tuple[int, Line, int | None]]:
    """(bucket, line, event time) for each state key a line goes to, as `streaming.framing.frame` routes it:
    a tick to every bucket, a partition event to one, anything without a usable time or key to the control key."""
    try:
        obj = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        obj = None
    fields = obj if isinstance(obj, dict) else {}
    ts, kind, topic, partition = fields.get("ts"), fields.get("type"), fields.get("topic"), fields.get("partition")
    timed = type(ts) is int and 0 <= ts <= MAX_STREAM_TS
    if timed and kind == "tick":
        return [(b, Line(ts, number, number, raw, True), ts) for b in buckets]
    if timed and kind in PARTITION_TYPES and type(topic) is str and type(partition) is int and partition >= 0:
        cluster = fields.get("cluster")
        key = f"{cluster if isinstance(cluster, str) else DEFAULT_CLUSTER}\0{topic}\0{partition}".encode()
        return [(buckets[zlib.crc32(key) % len(buckets)], Line(ts, number, number, raw, False), ts)]
    return [(CONTROL_KEY, Line(0, number, number, raw, False), None)]


def _frames(lines: list[Line]) -> Iterator[pd.DataFrame]:
    if lines:
        yield pd.DataFrame(
            {
                "ts": [line.ts for line in lines],
                "seq": [line.seq for line in lines],
                "arrival": [line.arrival for line in lines],
                "raw": [line.raw for line in lines],
                "shared": [line.shared for line in lines],
            }
        )


def run_stateful(
    lines: Iterable[bytes], cuts: Iterable[int], config: Config, buckets: int = 4, until: int | None = None
) -> ReplayResult:
    """Feed `lines` (seq = position, 1-based) to the real state function in micro-batches cut before each index in
    `cuts`, then finish at `until` as `isrwatch replay --engine spark` does."""
    raw_lines = list(lines)
    bucket_ids = list(range(buckets))
    step = state_function(config, bucket_ids, until, keep_blobs=True)
    collector = ReplayCollector(config, bucket_ids[0])
    blobs: dict[int, bytes] = {}
    timeouts: dict[int, int] = {}
    watermark = newest = 0
    bounds = sorted({c for c in cuts if 0 < c < len(raw_lines)} | {len(raw_lines)})
    start = 0
    for end in bounds:
        batch: dict[int, list[Line]] = defaultdict(list)
        for number in range(start + 1, end + 1):
            for bucket, line, event_time in route(raw_lines[number - 1], number, bucket_ids):
                batch[bucket].append(line)
                if event_time is not None:
                    newest = max(newest, event_time)
        start = end
        collector.add(_call(step, batch, blobs, timeouts, watermark))
        moved = max(watermark, newest - config.allowed_lateness_ms)
        if moved > watermark:
            watermark = moved
            collector.add(_call(step, {}, blobs, timeouts, watermark))  # the no-data batch
    return collector.finish(until)


def _call(
    step: StateFunction, batch: dict[int, list[Line]], blobs: dict[int, bytes], timeouts: dict[int, int], watermark: int
) -> list[Report]:
    """One micro-batch: every key with rows, and every key whose timeout the watermark has passed."""
    due = {key for key, at in timeouts.items() if at < watermark}
    reports = []
    for key in sorted(batch.keys() | due):
        timeouts.pop(key, None)
        state = FakeGroupState(blobs.get(key), watermark, timed_out=key not in batch)
        for frame in step((key,), _frames(batch.get(key, [])), state):
            reports.extend(decode_report(b) for b in frame["report"])
        if state.exists:
            blobs[key] = state.get[0]
        if state.timeout is not None:
            timeouts[key] = state.timeout
    return reports
