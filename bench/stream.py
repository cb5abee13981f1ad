"""`isrwatch bench stream`: events/s, micro-batch duration, decision latency and memory of `isrwatch run`.

Prints numbers; asserts nothing. Targets (issue 3, local[2]): >= 100,000 events/s sustained, p99
decision latency <= trigger + 2 s (from its cluster's frontier passing a decision's time, its time +
allowed_lateness_ms in real time, to its row being committed to the store), memory flat over a
10-minute run.

Two modes over the synthetic stream of `streaming.sim.synthetic` (10,000 partitions x RF 3, fetch
every 500 ms):
- backlog (default): --events pre-generated into --files files, consumed --files-per-batch files
  per micro-batch as fast as the job goes; also runs the local one-process replay on the same files
  for comparison. CPU time of the job's process tree per event gives the rate on 2 idle cores.
- real time (--duration SECONDS): a feeder process writes the stream as it happens (event time =
  wall clock) one file per second, the job runs with --trigger; RSS of the job's process tree
  (driver, JVM, Python workers) is sampled throughout.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import msgspec

from state.config import Config
from state.replay import parse_lines, replay, replay_events
from state.step import Settled
from streaming.job import JobOptions, StreamJob
from streaming.progress import input_lines, iso_ms
from streaming.sim.processes import descendants
from streaming.sim.sinks import PendingFile
from streaming.sim.synthetic import StreamShape, generate
from streaming.spark import SparkSettings

CONFIG = Config(replica_lag_time_max_ms=10_000)  # the engine benchmark's configuration


def _write(path: Path, events: list[dict]) -> None:
    """Write a JSONL file the file source only ever sees whole."""
    pending = PendingFile(path)
    encode = msgspec.json.encode
    for ev in events:
        pending.write(encode(ev) + b"\n")
    pending.publish()


def _tree(root: int) -> list[int]:
    """A process and all its descendants (driver, JVM, Python workers)."""
    return [root, *descendants(root)]


def _tree_rss_mb(root: int) -> float:
    total = 0
    for pid in _tree(root):
        with contextlib.suppress(OSError, StopIteration):
            total += next(
                int(line.split()[1])
                for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                if line.startswith("VmRSS:")
            )
    return total / 1024


def _tree_cpu_s(root: int, leave_out: int | None = None) -> float:
    """CPU seconds (user + system) the process tree has used: robust to other load on the machine."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in _tree(root):
        if pid == leave_out:
            continue
        with contextlib.suppress(OSError, IndexError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / ticks


class _Recorder:
    """Per-batch timings from the sink (commit time, decisions) and the listener (start, watermark, lines)."""

    def __init__(self) -> None:
        self.commits: dict[int, tuple[float, list[int], float]] = {}  # batch -> (wall s, decision times, CPU s)
        self.progress: dict[int, tuple[float, int, int]] = {}  # batch -> (start s, duration ms, lines)
        self.feeder: int | None = None  # a process of the tree that is not the job (real-time mode)

    def on_batch(self, batch_id: int, result: Settled, written: bool) -> None:
        self.commits[batch_id] = (time.time(), [d.ts for d in result.decisions], _tree_cpu_s(os.getpid(), self.feeder))

    def on_progress(self, raw: dict) -> None:
        self.progress[raw["batchId"]] = (iso_ms(raw["timestamp"]) / 1000, raw.get("batchDuration", 0), input_lines(raw))

    def latencies(self, since: int = 0) -> list[float]:
        """For each decision committed from batch `since` on (real time: event time is the wall clock): its
        commit time minus the moment its cluster's frontier could first pass it, its time + the lateness."""
        lateness = CONFIG.allowed_lateness_ms / 1000
        return [
            committed - ts / 1000 - lateness
            for batch_id, (committed, times, _) in self.commits.items()
            if batch_id >= since
            for ts in times
        ]


def _pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else (values or [0])[0]


def _job(args: argparse.Namespace, work: Path, recorder: _Recorder, **overrides: object) -> StreamJob:
    options = JobOptions(
        source=f"files:{work / 'inbox'}",
        store=f"sqlite:///{work / 'store.db'}",
        checkpoint=str(work / "checkpoint"),
        config=CONFIG,
        buckets=args.buckets,
        trigger_seconds=args.trigger,
        spark=SparkSettings(state_store=args.state_store, driver_memory=args.driver_memory),
        **overrides,
    )
    return StreamJob(
        options,
        echo=(lambda m: print(f"  {m}", flush=True)) if args.verbose else None,
        on_batch=recorder.on_batch,
        on_progress=recorder.on_progress,
    )


def _report(recorder: _Recorder, trigger: float | None, skip: int) -> None:
    batches = sorted(b for b, p in recorder.progress.items() if p[2] and b in recorder.commits)
    steady = batches[skip:]
    if len(steady) >= 2:
        events = sum(recorder.progress[b][2] for b in steady[1:])
        seconds = recorder.commits[steady[-1]][0] - recorder.commits[steady[0]][0]
        cpu = recorder.commits[steady[-1]][2] - recorder.commits[steady[0]][2]
        print(
            f"stream:  {events / seconds:>10,.0f} events/s sustained ({events:,} events in batches "
            f"{steady[1]}..{steady[-1]}, after {skip} warm-up batches; load average {os.getloadavg()[0]:.1f})"
        )
        print(
            f"cpu:     {cpu / events * 1e6:>10.1f} us per event over driver, JVM and Python workers = "
            f"{2 * events / cpu:,.0f} events/s on 2 otherwise idle cores"
        )
        durations = [recorder.progress[b][1] / 1000 for b in steady]
        print(
            f"batches: {len(batches)} with input; duration p50 {statistics.median(durations):.2f} s, "
            f"max {max(durations):.2f} s; {statistics.mean(recorder.progress[b][2] for b in steady):,.0f} "
            f"events per batch"
        )
    for label, lat in (("all", recorder.latencies()), ("steady", recorder.latencies(steady[1] if steady[1:] else 0))):
        if lat:
            target = (
                "a backlog: each batch passes a batch of decisions"
                if trigger is None
                else f"target p99 <= trigger {trigger:g} s + 2 s"
            )
            print(
                f"latency: decision p50 {_pct(lat, 50):.2f} s, p99 {_pct(lat, 99):.2f} s, max {max(lat):.2f} s "
                f"over {len(lat):,} decisions ({label}; {target})"
            )


def _generate(args: argparse.Namespace, staging: Path) -> list[Path]:
    staging.mkdir(parents=True, exist_ok=True)
    shape = StreamShape(partitions=args.partitions)
    started = time.perf_counter()
    per_file = -(-args.events // args.files)
    chunk: list[dict] = []
    paths: list[Path] = []
    for ev in generate(shape, args.events, args.seed):
        chunk.append(ev)
        if len(chunk) == per_file:
            paths.append(staging / f"gen-{len(paths):05d}.jsonl")
            _write(paths[-1], chunk)
            chunk = []
    if chunk:
        paths.append(staging / f"gen-{len(paths):05d}.jsonl")
        _write(paths[-1], chunk)
    print(
        f"generated {args.events:,}+ events into {len(paths)} files in {time.perf_counter() - started:.1f} s "
        f"({args.partitions:,} partitions x RF 3, fetch every 500 ms, lag 10 s)"
    )
    return paths


def backlog(args: argparse.Namespace, work: Path) -> None:
    inbox = work / "inbox"
    paths = sorted(inbox.glob("gen-*.jsonl"))
    if paths:  # a --keep directory of an earlier run: same input, fresh job
        print(f"reusing {len(paths)} generated files in {inbox}")
        shutil.rmtree(work / "checkpoint", ignore_errors=True)
        for path in work.glob("store.db*"):
            path.unlink()
    else:
        paths = _generate(args, work / "staging")
    if not args.no_local:
        with contextlib.ExitStack() as stack:
            started = time.perf_counter()
            result = replay([stack.enter_context(open(p, "rb")) for p in paths], CONFIG)
            elapsed = time.perf_counter() - started
        lines = result.summary["lines"]
        with contextlib.ExitStack() as stack:
            events, _, _ = parse_lines([stack.enter_context(open(p, "rb")) for p in paths])
        started = time.perf_counter()
        replay_events(events, CONFIG)
        engine_s = time.perf_counter() - started
        print(
            f"local:   {lines / elapsed:>10,.0f} events/s replay (JSONL -> records, one process), "
            f"{len(events) / engine_s:,.0f} events/s pure engine on parsed events"
        )
        del events, result

    inbox.mkdir(exist_ok=True)
    base = time.time() - len(paths) - 60
    for i, path in enumerate(paths):
        os.utime(path, (base + i, base + i))  # the file source takes files oldest first
        if path.parent != inbox:
            path.rename(inbox / path.name)
    paths = sorted(inbox.glob("gen-*.jsonl"))
    recorder = _Recorder()
    job = _job(args, work, recorder, available_now=True, max_per_batch=args.files_per_batch)
    peak = [0.0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(1.0):
            peak[0] = max(peak[0], _tree_rss_mb(os.getpid()))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.perf_counter()
    job.run()
    done.set()
    print(
        f"run:     {time.perf_counter() - started:.1f} s wall for all files, incl. Spark start; "
        f"peak RSS {peak[0]:,.0f} MiB (driver + JVM + Python workers)"
    )
    _report(recorder, None, skip=1)


def _feed(inbox: str, partitions: int, duration: float, seed: int) -> None:
    """Write the stream as it happens: every second, the events whose time has come, as one file."""
    start = time.time()
    shape = StreamShape(partitions=partitions, start_ms=int(start * 1000))
    stream = generate(shape, 10**12, seed)
    pending = next(stream)
    n = 0
    while time.time() - start < duration:
        time.sleep(max(0.0, start + n + 1 - time.time()))
        now_ms = int(time.time() * 1000)
        batch = []
        while pending["ts"] <= now_ms:
            batch.append(pending)
            pending = next(stream)
        _write(Path(inbox, f"feed-{n:06d}.jsonl"), batch)
        n += 1


def realtime(args: argparse.Namespace, work: Path) -> None:
    inbox = work / "inbox"
    inbox.mkdir()
    recorder = _Recorder()
    job = _job(args, work, recorder, until_idle=30)
    feeder = multiprocessing.get_context("spawn").Process(
        target=_feed, args=(str(inbox), args.partitions, args.duration, args.seed), daemon=True
    )
    job.start()
    feeder.start()
    recorder.feeder = feeder.pid
    samples: list[tuple[float, float]] = []
    started = time.time()
    while feeder.is_alive():
        time.sleep(10)
        samples.append((time.time() - started, _tree_rss_mb(os.getpid())))
        if args.verbose:
            print(f"  memory at {samples[-1][0]:.0f} s: {samples[-1][1]:,.0f} MiB", flush=True)
    job.wait()
    print(f"real time: {args.duration:g} s of a {args.partitions:,}-partition stream, trigger {args.trigger:g} s")
    _report(recorder, args.trigger, skip=2)
    if samples:
        minute = [s for s in samples if s[0] <= 60] or samples[:1]
        tail = [s for s in samples if s[0] >= samples[-1][0] - 60]
        print(
            f"memory:  RSS {statistics.mean(m for _, m in minute):,.0f} MiB in the first minute, "
            f"{statistics.mean(m for _, m in tail):,.0f} MiB in the last, peak {max(m for _, m in samples):,.0f} "
            f"MiB (driver + JVM + Python workers)"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="isrwatch bench stream", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--events",
        type=int,
        default=5_000_000,
        help="backlog events (default 5,000,000: the JVM's JIT needs a minute to settle)",
    )
    parser.add_argument("--partitions", type=int, default=10_000, help="partitions, RF 3 (default 10,000)")
    parser.add_argument("--files", type=int, default=100, help="backlog files (default 100)")
    parser.add_argument(
        "--files-per-batch",
        type=int,
        default=8,
        help="backlog files per micro-batch (default 8: 400,000 events, a 5 s trigger at 80k/s)",
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=0,
        metavar="SECONDS",
        help="real-time mode for this long instead of the backlog (600 = the memory run)",
    )
    parser.add_argument("--trigger", type=float, default=5.0, help="real-time trigger interval (default 5 s)")
    parser.add_argument("--buckets", type=int, default=16, help="state keys (default 16)")
    parser.add_argument("--state-store", choices=["hdfs", "rocksdb"], default="hdfs")
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--no-local", action="store_true", help="skip the local replay comparison")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (default: a temporary directory)")
    parser.add_argument("-v", "--verbose", action="store_true", help="the job's per-batch lines too")
    args = parser.parse_args(argv)
    work = Path(args.keep or tempfile.mkdtemp(prefix="isrwatch-bench-stream-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        (realtime if args.duration > 0 else backlog)(args, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
