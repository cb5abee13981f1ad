"""`isrwatch replay --engine spark`: the streaming query over files (trigger availableNow), then to --until.

The input files are staged in order as a file-source directory and read one file per micro-batch,
so the replay exercises the stream's cut-independence. When the query has drained, every bucket's
final state is advanced to --until + 1 with the same engine, and the propagation book likewise,
exactly as the local replay ends. Without late events the outputs equal `--engine local` (SPEC §6).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from state.config import Config
from state.engine import PartitionEngine
from state.events import DeadLetter, parse_event
from state.propagation import PropagationBook
from state.records import partition_record
from state.replay import ReplayResult

from .progress import ProgressListener, input_lines
from .query import DEFAULT_BUCKETS, Layout, plan
from .reports import decode_bucket
from .sink import BOOK_BLOB, collect, settle
from .sources import Source, read_stream
from .spark import SparkSettings, session
from .stateful import count_events

Progress = Callable[[str], None]


class _Collector:
    """foreachBatch target that keeps everything in memory: a replay writes files, not a store."""

    def __init__(self, config: Config, progress: Progress | None) -> None:
        self.config = config
        self.progress = progress
        self.book_blob: bytes | None = None
        self.book = PropagationBook(config)
        self.decisions: list[dict] = []
        self.propagations: list[dict] = []
        self.dead_letters: list[dict] = []
        self.counters: Counter[str] = Counter()
        self.states: dict[int, bytes] = {}
        self.after_until = 0
        self.events = 0
        self.max_ts = -1
        self.lines = 0
        self.last_progress = -1
        self.batches = 0

    def on_progress(self, progress: dict) -> None:
        self.lines += input_lines(progress)
        self.last_progress = progress["batchId"]

    def await_progress(self, last: dict | None, timeout: float = 10.0) -> None:
        """Spark delivers progress to listeners asynchronously: wait for the last batch's."""
        deadline = time.monotonic() + timeout
        while last is not None and self.last_progress < last["batchId"] and time.monotonic() < deadline:
            time.sleep(0.05)

    def __call__(self, df: object, batch_id: int) -> None:
        result = settle(self.config, collect(df), self.book_blob)
        self.book_blob = result.blobs[BOOK_BLOB]
        self.book = result.book
        self.decisions += result.decisions
        self.propagations += result.propagations
        self.dead_letters += result.dead_letters
        self.counters.update(result.counters)
        self.after_until += result.after_until
        for r in result.reports:
            self.events += r.events
            self.max_ts = max(self.max_ts, r.max_ts)
            if r.blob is not None:
                self.states[r.bucket] = r.blob
        self.batches += 1
        if self.progress:
            self.progress(f"batch {batch_id}: {len(result.decisions):,} decisions, "
                          f"{len(result.propagations):,} propagations, watermark {result.watermark}")


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


def replay_spark(paths: Sequence[str | os.PathLike], config: Config, until: int | None = None,
                 progress: Progress | None = None, files_per_batch: int = 1, buckets: int = DEFAULT_BUCKETS,
                 settings: SparkSettings | None = None) -> ReplayResult:
    """Replay files through the streaming query; the result has the local replay's shape and summary keys."""
    started = time.perf_counter()
    spark = session(settings)
    collector = _Collector(config, progress)
    with tempfile.TemporaryDirectory(prefix="isrwatch-replay-") as tmp:
        inbox = Path(tmp, "events")
        inbox.mkdir()
        ranks = _stage(paths, inbox)
        layout = Layout.create(buckets, int(spark.conf.get("spark.sql.shuffle.partitions")))
        reports = plan(read_stream(spark, Source("files", str(inbox)), files_per_batch), config, layout,
                       ranks=ranks, until=until, keep_blobs=True)
        name = f"isrwatch-replay-{os.getpid()}-{id(collector):x}"
        listener = ProgressListener(name, collector.on_progress)
        spark.streams.addListener(listener)
        try:
            query = (reports.writeStream.queryName(name).foreachBatch(collector)
                     .option("checkpointLocation", str(Path(tmp, "checkpoint"))).trigger(availableNow=True).start())
            query.awaitTermination()
            collector.await_progress(query.lastProgress)
        finally:
            spark.streams.removeListener(listener)
    streamed = time.perf_counter()
    # Finish like the local replay: parse what is still pending, then advance everything to --until.
    first = layout.ids[0]
    counters = collector.counters
    dead = collector.dead_letters
    events, max_ts = collector.events, collector.max_ts
    engines = []
    for bucket, blob in sorted(collector.states.items()):
        held = decode_bucket(blob)
        valid = []
        for chunk in held.pending:
            for _, seq, arrival, raw, shared in chunk.lines():
                ev = parse_event(raw, seq, arrival)
                if type(ev) is not DeadLetter:
                    valid.append(ev)
                elif bucket == first or not shared:
                    dead.append(ev.to_record())
                    counters[f"dead_letters.{ev.category}"] += 1
        n, latest = count_events(valid, bucket == first)
        events, max_ts = events + n, max(max_ts, latest)
        engine = PartitionEngine(config, held.engine, emit_propagation_ticks=bucket == first)
        counters["late_events"] += engine.add(valid)
        engines.append(engine)
    end = until if until is not None else max_ts
    decisions = collector.decisions
    items: list = []
    partitions = []
    buffered = 0
    for engine in engines:
        out = engine.advance(end + 1)
        decisions += out.decisions
        items += out.changes + out.ticks
        counters.update({f"ignored_fetches.{k}": v for k, v in out.ignored_fetches.items()})
        counters.update({f"ignored_appends.{k}": v for k, v in out.ignored_appends.items()})
        partitions.extend(engine.partitions.values())
        buffered += len(engine.buffer)
    book = collector.book
    counters["late_events"] += book.add(items)
    propagations = collector.propagations + book.advance(end + 1)
    elapsed = time.perf_counter() - started

    def by(prefix: str) -> dict[str, int]:
        return dict(sorted((k.split(".", 1)[1], v) for k, v in counters.items() if v and k.startswith(prefix + ".")))

    result = ReplayResult(
        decisions=decisions, propagations=propagations, dead_letters=dead, brokers=book.brokers_view(),
        states=[partition_record(p, config) for p in sorted(partitions, key=lambda p: p.key)])
    result.summary = {
        "engine": "spark",
        "lines": collector.lines,
        "events": events + collector.after_until,
        "events_after_until": collector.after_until + buffered,
        "until": end,
        "decisions": len(decisions),
        "decisions_by_kind": dict(sorted(Counter(d["kind"] for d in decisions).items())),
        "shrinks_by_reason": dict(sorted(Counter(r for d in decisions for r in d["reasons"].values()).items())),
        "propagations": len(propagations),
        "propagations_by_trigger": dict(sorted(Counter(p["trigger"] for p in propagations).items())),
        "partitions": len(partitions),
        "ignored_fetches_by_reason": by("ignored_fetches"),
        "ignored_appends_by_reason": by("ignored_appends"),
        "dead_letters": len(dead),
        "dead_letters_by_reason": by("dead_letters"),
        "late_events": counters["late_events"],
        "partitions_pending_propagation": sum(len(b.pending) for b in book.brokers.values()),
        "micro_batches": collector.batches,
        "buckets": layout.buckets,
        "stream_seconds": round(streamed - started, 3),
        "seconds": round(elapsed, 3),
        "events_per_second": round(collector.lines / elapsed) if elapsed > 0 else None,
        "config": config.to_dict(),
    }
    return result
