"""`isrwatch replay --engine spark`: the streaming query over files (trigger availableNow), then to --until.

The input files are staged in order as a file-source directory and read one file per micro-batch,
so the replay exercises the stream's cut-independence. `ReplayCollector` keeps each batch and
finishes at --until exactly as the local replay ends; without late events the outputs equal
`--engine local` (SPEC §6).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from isrwatch.state.config import Config
from isrwatch.state.replay import ReplayResult

from .buckets import DEFAULT_BUCKETS, Layout
from .collect import ReplayCollector
from .progress import ProgressListener, input_lines
from .query import plan
from .sink import collect
from .sources import Source, read_stream
from .spark import SparkSettings, session

Progress = Callable[[str], None]


class _Batches:
    """foreachBatch target and progress listener callback of one replay query."""

    def __init__(self, collector: ReplayCollector, progress: Progress | None) -> None:
        self.collector = collector
        self.progress = progress
        self.lines = 0
        self.last_progress = -1

    def on_progress(self, progress: dict) -> None:
        self.lines += input_lines(progress)
        self.last_progress = progress["batchId"]

    def await_progress(self, last: dict | None, timeout: float = 10.0) -> None:
        """Spark delivers progress to listeners asynchronously: wait for the last batch's."""
        deadline = time.monotonic() + timeout
        while last is not None and self.last_progress < last["batchId"] and time.monotonic() < deadline:
            time.sleep(0.05)

    def __call__(self, df: object, batch_id: int) -> None:
        settled = self.collector.add(collect(df))
        if self.progress:
            self.progress(
                f"batch {batch_id}: {len(settled.decisions):,} decisions, "
                f"{len(settled.propagations):,} propagations, watermark {settled.watermark}"
            )


def _stage(paths: Sequence[str | os.PathLike], inbox: Path) -> dict[str, int]:
    """Link (or copy) the files into the source directory, oldest first, and rank them in the given order."""
    ranks = {}
    base = time.time() - len(paths) - 60
    for i, path in enumerate(paths):
        name = f"{i:06d}-{Path(path).name}"
        target = inbox / name
        try:
            os.link(path, target)
        except OSError:
            shutil.copyfile(path, target)
        os.utime(target, (base + i, base + i))  # the file source takes files in modification-time order
        ranks[name] = i
    return ranks


def replay_spark(
    paths: Sequence[str | os.PathLike],
    config: Config,
    until: int | None = None,
    progress: Progress | None = None,
    files_per_batch: int = 1,
    buckets: int = DEFAULT_BUCKETS,
    settings: SparkSettings | None = None,
    now: int | None = None,
) -> ReplayResult:
    """Replay files through the streaming query; the result has the local replay's shape and summary keys.

    Every line counts as received at `now` (None: the events' own times are trusted, as the local replay does).
    """
    from pyspark.sql import functions as F

    started = time.perf_counter()
    spark = session(settings)
    with tempfile.TemporaryDirectory(prefix="isrwatch-replay-") as tmp:
        inbox = Path(tmp, "events")
        inbox.mkdir()
        ranks = _stage(paths, inbox)
        layout = Layout.create(buckets, int(spark.conf.get("spark.sql.shuffle.partitions")))
        batches = _Batches(ReplayCollector(config, layout.ids[0]), progress)
        source = read_stream(spark, Source("files", str(inbox)), files_per_batch)
        reports = plan(
            source.withColumn("received", F.lit(now).cast("long")),
            config,
            layout,
            ranks=ranks,
            until=until,
            keep_blobs=True,
        )
        name = f"isrwatch-replay-{os.getpid()}-{id(batches):x}"
        listener = ProgressListener(name, batches.on_progress)
        spark.streams.addListener(listener)
        try:
            query = (
                reports.writeStream.queryName(name)
                .foreachBatch(batches)
                .option("checkpointLocation", str(Path(tmp, "checkpoint")))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            batches.await_progress(query.lastProgress)
        finally:
            spark.streams.removeListener(listener)
    streamed = time.perf_counter()
    result = batches.collector.finish(until)
    elapsed = time.perf_counter() - started
    result.summary.update(
        {
            "engine": "spark",
            "lines": batches.lines,
            "buckets": layout.buckets,
            "stream_seconds": round(streamed - started, 3),
            "seconds": round(elapsed, 3),
            "events_per_second": round(batches.lines / elapsed) if elapsed > 0 else None,
        }
    )
    return result
