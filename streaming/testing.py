"""The streaming shell without Spark: the real state function called under Spark's calling rules.

Like bytewax's testing harness, this runs a stateful operator without its cluster runtime, so
property tests can try thousands of micro-batch cuts at Python speed, including a batch that fails
and is run again. What it reproduces of `applyInPandasWithState` without timeouts (PySpark 4.x): in
each micro-batch every key with rows is called once with its rows, each batch read as one file by the
real framer (`Lines.of_file`: line numbers, blank lines, the last line's beacon) and routed by
`isrwatch.streaming.framing.route`, in no particular order (here: reversed, the least convenient), its
state round-tripping through bytes between calls. A failed batch is what Spark re-runs after a
failure: its state updates and its reports are dropped (the sink did not commit), and the same
input runs again from the state the previous batch committed. The Spark parity tests remain the final
judge.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from itertools import pairwise

import pandas as pd

from isrwatch.state.config import Config
from isrwatch.state.replay import ReplayResult
from isrwatch.state.step import Settled

from .collect import ReplayCollector
from .framing import NOT_RECEIVED, Lines, Routed, pack, route
from .reports import Report, decode_report
from .sink import settle_reports
from .stateful import StateFunction, state_function


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
    aborts: Iterable[int] = (),
    finish: bool = True,
    each_batch: Callable[[Settled], None] | None = None,
    each_sink: Callable[[Mapping[str, bytes]], None] | None = None,
) -> ReplayResult:
    """Feed `lines` to the real state function in micro-batches cut before each index in `cuts`, each batch one
    file (a line without `seq` gets its number in that file), then finish at `until` as `isrwatch replay --engine
    spark` does. `received`: when every line arrived (None: trust the events' times). `aborts`: the micro-batches
    (0-based) that fail once after every key ran and the sink settled them, and run again from the prior state.
    `finish=False`: only what the micro-batches settled by themselves, as a live stream has it (no summary).
    `each_batch`: sees what each micro-batch settled, as the store would take it; `each_sink`: the sink's state it
    left (`sink.SINK_BLOBS`)."""
    raw_lines = list(lines)
    bucket_ids = list(range(buckets))
    step = state_function(config, bucket_ids, until, keep_blobs=True)
    collector = ReplayCollector(config, bucket_ids[0])
    blobs: dict[int, bytes] = {}
    failing = set(aborts)
    bounds = sorted({c for c in cuts if 0 < c < len(raw_lines)} | {len(raw_lines)})
    for batch_id, (start, end) in enumerate(pairwise([0, *bounds])):
        file = b"".join(line + b"\n" for line in raw_lines[start:end])
        framed = Lines.of_file(file, NOT_RECEIVED if received is None else received, batch_id)
        batch = route(Lines(*(column[::-1] for column in framed)), bucket_ids, until)
        if batch_id in failing:  # the attempt that fails: everything it wrote is lost
            settle_reports(config, _call(step, batch, dict(blobs)), collector.sink_blobs)
        settled = collector.add(_call(step, batch, blobs))
        if each_batch is not None:
            each_batch(settled)
        if each_sink is not None:
            each_sink(collector.sink_blobs)
    return collector.finish(until) if finish else ReplayResult(**vars(collector.total))


def _call(step: StateFunction, batch: dict[int, Routed], blobs: dict[int, bytes]) -> list[Report]:
    """One micro-batch: each key with lines called once, its state read from and written back to `blobs`."""
    reports = []
    for key in sorted(batch):
        state = FakeGroupState(blobs.get(key))
        for frame in step((key,), iter([pd.DataFrame({"data": [pack(batch[key])]})]), state):
            reports.extend(decode_report(b) for b in frame["report"])
        if state.exists:
            blobs[key] = state.get[0]
    return reports
