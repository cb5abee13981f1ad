"""`isrwatch bench stream`: the streaming job against one plain process, events/s, CPU per event, latency, memory.

Prints numbers; asserts nothing; the targets and the figures measured are in docs/performance.md. A
decision's latency runs from its cluster's frontier passing its time (its time + allowed_lateness_ms in real
time) to its row being committed to the store.

Two modes, over one of two event shapes (--shape): `synthetic` (`isrwatch.sim.synthetic`: 10,000
partitions x RF 3, every follower fetching every 500 ms, appends every second, scheduled checks) or
`agent` (`isrwatch.sim.agent_shape`: what isrwatch-agent sends — per-broker ticks, caught-up fetches
coalesced to one per follower per isr-expiration run, appends read by the checks; --profile agent):
- backlog (default): --events pre-generated into --files files, consumed --files-per-batch files
  per micro-batch as fast as the job goes; the local one-process replay runs on the same files first.
  The JVM compiles for a minute or two (JIT): the first third of the batches (--warmup) are left out
  of the figures, so give it enough events (default 5M at 400,000 per batch).
  The ratio is printed twice: on the wall clock (what this machine did, other load included) and on
  CPU time (the stream's 2 x events per CPU second, the rate two otherwise idle cores would give if
  both were kept busy, against the replay's events per CPU second). CPU per event is split into the
  driver (this process: the sink and the store), the driver's JVM, the executor JVMs (on a cluster) and the
  Python workers.
- real time (--duration SECONDS): a feeder process writes the stream as it happens (event time =
  wall clock) one file per second, the job runs with --trigger; RSS of the job's process tree
  (driver, JVM, Python workers) is sampled throughout (--duration 600 is the memory run).

To split fixed from per-event cost, run the backlog twice with different --files-per-batch (e.g. 2 and
20 files of 50,000 events: 100k and 1M events per batch) and compare the per-batch figures; --stages
adds Spark's own per-stage task metrics (the map stage: read, frame, shuffle write; the reduce stage:
shuffle read, sort, the Python state function, the state store) from its REST API; --master local[1]
measures one core's share.

On a cluster (--master spark://…, the executors on this machine: a standalone master and workers started here,
deploy/README.md) the executors are the workers' children, not this process's: they are found by their
application id (/proc command lines) and counted, with their Python workers, as `executors` and `workers`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import msgspec

from isrwatch.lab.jars import spark_kafka_jars
from isrwatch.processes.proc import cpu_seconds, descendants
from isrwatch.sim.agent_shape import AgentShape, generate_agent
from isrwatch.sim.sinks import PendingFile
from isrwatch.sim.synthetic import StreamShape, generate
from isrwatch.state.config import Config
from isrwatch.state.replay import parse_lines, replay, replay_events
from isrwatch.state.step import Settled
from isrwatch.streaming.job import JobOptions, StreamJob
from isrwatch.streaming.progress import input_lines, iso_ms
from isrwatch.streaming.spark import SparkSettings

from .measure import percentile

CONFIG = Config(replica_lag_time_max_ms=10_000)  # the engine benchmark's configuration
AGENT_CONFIG = CONFIG.with_profile("agent")  # the brokers' own ticks run the checks
SHAPES = ("synthetic", "agent")


def _config(shape: str) -> Config:
    return AGENT_CONFIG if shape == "agent" else CONFIG


def _events(shape: str, partitions: int, events: int, seed: int, start_ms: int | None = None) -> Iterator[dict]:
    """The event shape's generator; `start_ms` None: the shape's default start."""
    start = {} if start_ms is None else {"start_ms": start_ms}
    if shape == "agent":
        return generate_agent(
            AgentShape(partitions=partitions, lag_ms=CONFIG.replica_lag_time_max_ms, **start), events, seed
        )
    return generate(StreamShape(partitions=partitions, **start), events, seed)


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


EXECUTOR_MAIN = b"org.apache.spark.executor.CoarseGrainedExecutorBackend"


def executor_pids(app_id: str) -> list[int]:
    """The executor JVMs of Spark application `app_id` running on this machine, found by their command line: on a
    standalone cluster they are the workers' children, not the driver's."""
    found = []
    wanted = b"\0--app-id\0" + app_id.encode() + b"\0"
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                line = (entry / "cmdline").read_bytes()
                if EXECUTOR_MAIN in line and wanted in line:
                    found.append(int(entry.name))
    return found


def _job_pids(root: int, app_id: str | None = None) -> tuple[list[int], set[int]]:
    """The job's processes and, of them, the executor JVMs: the driver (`root`) and its descendants (its JVM; in
    local mode the Python workers too) and, given the application id of a cluster whose executors run on this
    machine, each executor JVM and its Python workers."""
    pids, executors = _tree(root), set(executor_pids(app_id) if app_id else ())
    for executor in executors:
        pids += _tree(executor)
    return pids, executors


def _tree_rss_mb(root: int, app_id: str | None = None) -> float:
    return sum(_parts_rss_mb(root, app_id).values())


def _parts_rss_mb(root: int, app_id: str | None = None) -> dict[str, float]:
    """RSS of the job's processes by part (`PARTS`: the driver, its JVM, a cluster's executor JVMs, the Python
    workers), MiB."""
    total = dict.fromkeys(PARTS, 0.0)
    pids, executors = _job_pids(root, app_id)
    for pid in pids:
        with contextlib.suppress(OSError, StopIteration):
            status = Path(f"/proc/{pid}/status").read_text().splitlines()
            rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
            name = next(line.split()[1] for line in status if line.startswith("Name:"))
            part = "executors" if pid in executors else "jvm" if name == "java" else "workers"
            total["driver" if pid == root else part] += rss / 1024
    return total


PARTS = ("driver", "jvm", "executors", "workers")


def _tree_cpu_s(root: int, leave_out: int | None = None, app_id: str | None = None) -> dict[str, float]:
    """CPU seconds (user + system) the job's processes have used, by part: the driver (`root`), the driver's JVM
    (in local mode it runs the tasks), the executor JVMs (a cluster's, `app_id`), the Python workers. CPU time is
    robust to other load on the machine; wall time is not."""
    total = dict.fromkeys(PARTS, 0.0)
    pids, executors = _job_pids(root, app_id)
    for pid in pids:
        if pid == leave_out:
            continue
        with contextlib.suppress(OSError, IndexError):
            name, cpu = cpu_seconds(pid)
            part = (
                "driver"
                if pid == root
                else "executors"
                if pid in executors
                else "jvm"
                if name.endswith("(java")
                else "workers"
            )
            total[part] += cpu
    return total


@dataclass
class _Commit:
    wall: float  # when the batch was committed
    decisions: list[int]  # the committed decisions' event times
    cpu: dict[str, float]  # the job's CPU seconds so far, by part
    records: int  # partition rows written


class _Recorder:
    """Per-batch timings from the sink (commit time, decisions) and the listener (start, duration, lines)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.commits: dict[int, _Commit] = {}
        self.progress: dict[int, tuple[float, int, int, dict[str, int]]] = {}  # (start s, ms, lines, durationMs)
        self.feeder: int | None = None  # a process of the tree that is not the job (real-time mode)
        self.app_id: str | None = None  # on a cluster: the application whose executors run on this machine
        # CPU seconds the benchmark's own memory sampler has spent in the driver's process: left out of the driver's
        # figure (a scan of /proc each second; on a loaded machine, with batches of minutes, it was most of it).
        self.sampler_cpu = 0.0

    def on_batch(self, batch_id: int, result: Settled, written: bool) -> None:
        cpu = _tree_cpu_s(os.getpid(), self.feeder, self.app_id)
        cpu["driver"] -= self.sampler_cpu
        self.commits[batch_id] = _Commit(
            time.time(),
            [d.ts for d in result.decisions],
            cpu,
            len(result.records) if result.partitions_written is None else result.partitions_written,
        )

    def on_progress(self, raw: dict) -> None:
        self.progress[raw["batchId"]] = (
            iso_ms(raw["timestamp"]) / 1000,
            raw.get("batchDuration", 0),
            input_lines(raw),
            raw.get("durationMs") or {},
        )

    def latencies(self, since: int = 0) -> list[float]:
        """For each decision committed from batch `since` on (real time: event time is the wall clock): its
        commit time minus the moment its cluster's frontier could first pass it, its time + the lateness."""
        lateness = self.config.allowed_lateness_ms / 1000
        return [
            c.wall - ts / 1000 - lateness
            for batch_id, c in self.commits.items()
            if batch_id >= since
            for ts in c.decisions
        ]


def _job(args: argparse.Namespace, work: Path, recorder: _Recorder, **overrides: object) -> StreamJob:
    spark = SparkSettings.from_args(args, spark_kafka_jars())
    if args.stages:  # Spark's REST API (on a free port) keeps every stage of the run
        extra = {
            "spark.ui.enabled": "true",
            "spark.ui.port": "0",
            "spark.ui.retainedStages": "100000",
            "spark.ui.retainedJobs": "100000",
            **spark.extra,
        }
        spark = replace(spark, extra=extra)
    options = JobOptions(
        source=f"files:{work / 'inbox'}",
        store=args.store or f"sqlite:///{work / 'store.db'}",
        checkpoint=str(work / "checkpoint"),
        config=_config(args.shape),
        buckets=args.buckets,
        trigger_seconds=args.trigger,
        spark=spark,
        **overrides,
    )
    return StreamJob(
        options,
        echo=(lambda m: print(f"  {m}", flush=True)) if args.verbose else None,
        on_batch=recorder.on_batch,
        on_progress=recorder.on_progress,
    )


def _watch_cluster(job: StreamJob, recorder: _Recorder) -> None:
    """On a cluster (a master not local), count the application's executors too: those on this machine."""
    assert job.spark is not None
    sc = job.spark.sparkContext
    if sc.master.startswith("local"):
        return
    recorder.app_id = sc.applicationId
    print(
        f"cluster: {sc.master}, application {sc.applicationId}: {len(executor_pids(sc.applicationId))} executors "
        "on this machine, counted with their Python workers (executors elsewhere are not)"
    )


@dataclass
class _Local:
    """The one-process replay of the same files: events/s on the wall clock and per CPU second."""

    wall_rate: float
    cpu_rate: float


def _report(recorder: _Recorder, trigger: float | None, skip: int, local: _Local | None = None) -> None:
    batches = sorted(b for b, p in recorder.progress.items() if p[2] and b in recorder.commits)
    steady = batches[skip:]
    if len(steady) >= 2:
        first, last = recorder.commits[steady[0]], recorder.commits[steady[-1]]
        events = sum(recorder.progress[b][2] for b in steady[1:])
        seconds = last.wall - first.wall
        cpu = {part: last.cpu[part] - first.cpu[part] for part in PARTS}
        total_cpu = sum(cpu.values())
        rate, cpu_rate = events / seconds, 2 * events / total_cpu
        print(
            f"stream:  {rate:>10,.0f} events/s sustained ({events:,} events in batches "
            f"{steady[1]}..{steady[-1]}, after {skip} warm-up batches; load average {os.getloadavg()[0]:.1f})"
        )
        print(
            f"cpu:     {total_cpu / events * 1e6:>10.2f} us per event = "
            + " + ".join(f"{cpu[p] / events * 1e6:.2f} {p}" for p in PARTS if p != "executors" or cpu[p])
            + f"; {cpu_rate:,.0f} events/s on 2 otherwise idle cores"
        )
        if local is not None:
            print(
                f"ratio:   {rate / local.wall_rate:>10.2f} stream/replay on the wall clock "
                f"({rate:,.0f} vs {local.wall_rate:,.0f} events/s, same run)"
            )
            print(
                f"ratio:   {cpu_rate / local.cpu_rate:>10.2f} stream/replay on CPU time "
                f"({cpu_rate:,.0f} events/s on 2 cores vs {local.cpu_rate:,.0f} on 1)"
            )
        n = len(steady) - 1
        durations = [recorder.progress[b][1] / 1000 for b in steady]
        phases: dict[str, float] = {}
        for b in steady[1:]:
            for name, ms in recorder.progress[b][3].items():
                phases[name] = phases.get(name, 0) + ms / 1000 / n
        print(
            f"batches: {len(batches)} with input; duration p50 {statistics.median(durations):.2f} s, "
            f"max {max(durations):.2f} s; per batch {events / n:,.0f} events, {seconds / n:.2f} s wall, "
            f"{total_cpu / n:.2f} s CPU, {sum(recorder.commits[b].records for b in steady[1:]) / n:,.0f} "
            f"partition rows written"
        )
        top = sorted(phases.items(), key=lambda kv: -kv[1])
        print("phases:  " + ", ".join(f"{name} {s:.2f} s" for name, s in top if s >= 0.005) + " (mean per batch)")
    if trigger is None:
        return  # a backlog's events are long past: latency means nothing there
    for label, lat in (("all", recorder.latencies()), ("steady", recorder.latencies(steady[1] if steady[1:] else 0))):
        if lat:
            print(
                f"latency: decision p50 {percentile(lat, 50):.2f} s, p99 {percentile(lat, 99):.2f} s, "
                f"max {max(lat):.2f} s over {len(lat):,} decisions ({label}; target p99 <= trigger {trigger:g} s + 2 s)"
            )


def _stages(job: StreamJob, skip: int) -> None:
    """Spark's task metrics per stage kind (map: read, frame, shuffle write; reduce: the rest), mean per batch."""
    assert job.spark is not None
    url = job.spark.sparkContext.uiWebUrl
    if not url:
        return

    def get(path: str) -> list[dict]:
        with urllib.request.urlopen(f"{url}/api/v1/applications/{job.spark.sparkContext.applicationId}{path}") as r:
            return json.load(r)

    batch_of = {}
    for j in get("/jobs"):
        desc = j.get("description") or ""
        if "\nbatch = " in desc:
            for s in j["stageIds"]:
                batch_of[s] = int(desc.rsplit("batch = ", 1)[1])
    stages = [s for s in get("/stages") if s["status"] == "COMPLETE" and batch_of.get(s["stageId"], -1) >= skip]
    kinds: dict[str, list[dict]] = {"map": [], "reduce": []}
    for s in stages:
        kinds["map" if s["shuffleWriteBytes"] else "reduce"].append(s)
    n = len({batch_of[s["stageId"]] for s in stages}) or 1
    for kind, group in kinds.items():
        if not group:
            continue
        run = sum(s["executorRunTime"] for s in group) / 1000 / n
        jvm = sum(s["executorCpuTime"] for s in group) / 1e9 / n
        gc = sum(s["jvmGcTime"] for s in group) / 1000 / n
        shuffle = sum(s["shuffleWriteBytes"] + s["shuffleReadBytes"] for s in group) / n / 2**20
        write = sum(s["shuffleWriteTime"] for s in group) / 1e9 / n
        print(
            f"stage:   {kind:<6} per batch: task time {run:.2f} s, JVM CPU {jvm:.2f} s, GC {gc:.2f} s, "
            f"shuffle {shuffle:.1f} MiB" + (f" (write {write:.2f} s)" if write else "") + f" over {n} batches"
        )


def _generate(args: argparse.Namespace, staging: Path) -> list[Path]:
    staging.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    per_file = -(-args.events // args.files)
    chunk: list[dict] = []
    paths: list[Path] = []
    for ev in _events(args.shape, args.partitions, args.events, args.seed):
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
        f"({args.shape} shape, {args.partitions:,} partitions x RF 3, lag 10 s)"
    )
    return paths


def _local(paths: list[Path], config: Config) -> _Local:
    """The one-process replay of the files (JSONL -> records), timed on the wall clock and in CPU time."""
    with contextlib.ExitStack() as stack:
        wall, cpu = time.perf_counter(), time.process_time()
        result = replay([stack.enter_context(open(p, "rb")) for p in paths], config)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    lines = result.summary["lines"]
    del result
    with contextlib.ExitStack() as stack:
        events, _, _ = parse_lines([stack.enter_context(open(p, "rb")) for p in paths])
    started = time.process_time()
    replay_events(events, config)
    engine_s = time.process_time() - started
    print(
        f"local:   {lines / wall:>10,.0f} events/s replay (JSONL -> records, one process; {lines / cpu:,.0f} per CPU "
        f"second), {len(events) / engine_s:,.0f} per CPU second pure engine on parsed events"
    )
    return _Local(lines / wall, lines / cpu)


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
    local = None if args.no_local else _local(paths, _config(args.shape))

    inbox.mkdir(exist_ok=True)
    base = time.time() - len(paths) - 60
    for i, path in enumerate(paths):
        os.utime(path, (base + i, base + i))  # the file source takes files oldest first
        if path.parent != inbox:
            path.rename(inbox / path.name)
    recorder = _Recorder(_config(args.shape))
    job = _job(args, work, recorder, available_now=True, max_per_batch=args.files_per_batch)
    peak = [0.0]
    parts = dict.fromkeys(PARTS, 0.0)  # each part's own peak
    done = threading.Event()

    def sample() -> None:
        while not done.wait(1.0):
            now = _parts_rss_mb(os.getpid(), recorder.app_id)
            peak[0] = max(peak[0], sum(now.values()))
            parts.update({part: max(parts[part], mb) for part, mb in now.items()})
            recorder.sampler_cpu = time.thread_time()

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.perf_counter()
    job.start()
    _watch_cluster(job, recorder)
    try:
        job.wait()
    finally:
        job.stop()
    done.set()
    print(
        f"run:     {time.perf_counter() - started:.1f} s wall for all files, incl. Spark start; "
        f"peak RSS {peak[0]:,.0f} MiB (driver + JVMs + Python workers; each part's own peak: "
        + ", ".join(f"{part} {mb:,.0f}" for part, mb in parts.items())
        + " MiB)"
    )
    with_input = sum(1 for p in recorder.progress.values() if p[2])
    skip = max(1, with_input // 3) if args.warmup is None else args.warmup
    _report(recorder, None, skip=skip, local=local)
    if args.stages:
        _stages(job, skip=skip + 1)


def _feed(inbox: str, shape: str, partitions: int, duration: float, seed: int) -> None:
    """Write the stream as it happens: every second, the events whose time has come, as one file."""
    start = time.time()
    stream = _events(shape, partitions, 10**12, seed, start_ms=int(start * 1000))
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
    recorder = _Recorder(_config(args.shape))
    job = _job(args, work, recorder, until_idle=30)
    feeder = multiprocessing.get_context("spawn").Process(
        target=_feed, args=(str(inbox), args.shape, args.partitions, args.duration, args.seed), daemon=True
    )
    job.start()
    _watch_cluster(job, recorder)
    feeder.start()
    recorder.feeder = feeder.pid
    samples: list[tuple[float, float]] = []
    started = time.time()
    while feeder.is_alive():
        time.sleep(10)
        samples.append((time.time() - started, _tree_rss_mb(os.getpid(), recorder.app_id)))
        if args.verbose:
            print(f"  memory at {samples[-1][0]:.0f} s: {samples[-1][1]:,.0f} MiB", flush=True)
    job.wait()
    job.stop()
    print(f"real time: {args.duration:g} s of a {args.partitions:,}-partition stream, trigger {args.trigger:g} s")
    _report(recorder, args.trigger, skip=2)
    if samples:
        minute = [s for s in samples if s[0] <= 60] or samples[:1]
        tail = [s for s in samples if s[0] >= samples[-1][0] - 60]
        print(
            f"memory:  RSS {statistics.mean(m for _, m in minute):,.0f} MiB in the first minute, "
            f"{statistics.mean(m for _, m in tail):,.0f} MiB in the last, peak {max(m for _, m in samples):,.0f} "
            f"MiB (driver + JVMs + Python workers)"
        )
    if args.stages:
        _stages(job, skip=3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="isrwatch bench stream", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    queue = parser.add_argument_group("backlog (the default mode)")
    queue.add_argument("--events", type=int, default=5_000_000, help="events to generate (default 5,000,000)")
    queue.add_argument("--files", type=int, default=100, help="files to spread them over (default 100)")
    queue.add_argument("--files-per-batch", type=int, default=8, help="files per micro-batch (default 8)")
    queue.add_argument("--warmup", type=int, metavar="BATCHES", help="batches left out (default: the first third)")
    parser.add_argument("--shape", choices=SHAPES, default="synthetic", help="event shape (default synthetic)")
    parser.add_argument("--partitions", type=int, default=10_000, help="partitions, RF 3 (default 10,000)")
    parser.add_argument(
        "--duration", type=float, default=0, metavar="SECONDS", help="real time for this long instead (600: memory)"
    )
    parser.add_argument("--trigger", type=float, default=5.0, help="real-time trigger interval (default 5 s)")
    parser.add_argument("--buckets", type=int, default=16, help="state keys (default 16)")
    parser.add_argument(
        "--store", metavar="URL", help="an empty store to write to (default: SQLite in the work directory)"
    )
    SparkSettings.add_arguments(parser)
    parser.add_argument(
        "--stages",
        action="store_true",
        help="also print Spark's per-stage task metrics (enables its UI on a free port)",
    )
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
