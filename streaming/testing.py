"""The streaming shell without Spark: the real state function called under Spark's calling rules.

Like bytewax's testing harness, this runs a stateful operator without its cluster runtime, so
property tests can try thousands of micro-batch cuts at Python speed. What it reproduces of
`applyInPandasWithState` without timeouts (PySpark 4.x): in each micro-batch every key with rows is
called once with its rows, its lines packed by the real framer (`isrwatch.streaming.framing.route`) in no particular
order (here: reversed, the least convenient), its state round-tripping through bytes
between calls. The Spark parity tests remain the final judge.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from isrwatch.state.config import Config
from isrwatch.state.replay import ReplayResult

from .collect import ReplayCollector
from .framing import NOT_RECEIVED, Lines, pack, route
from .reports import decode_report
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
        kept = [n for n in range(end, start, -1) if raw_lines[n - 1] and not raw_lines[n - 1].isspace()]
        numbers = np.array(kept, dtype=np.int64)
        at = np.full(len(kept), NOT_RECEIVED if received is None else received, dtype=np.int64)
        batch = route(Lines([raw_lines[n - 1] for n in kept], numbers, numbers, at, numbers < 0), bucket_ids, until)
        start = end
        reports = []
        for key in sorted(batch):
            state = FakeGroupState(blobs.get(key))
            for frame in step((key,), iter([pd.DataFrame({"data": [pack(batch[key])]})]), state):
                reports.extend(decode_report(b) for b in frame["report"])
            if state.exists:
                blobs[key] = state.get[0]
        collector.add(reports)
    return collector.finish(until)
