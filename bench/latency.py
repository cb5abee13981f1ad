"""`isrwatch bench latency`: from a real broker's ISR write to isrwatch's API showing it.

On the lab (`isrwatch lab up --agent`: Kafka 3.9.2 brokers in ZooKeeper mode, each with isrwatch-agent sending to
the monitor broker's isrwatch.events), for each --trigger value: start `isrwatch run --source kafka:<monitor>/
isrwatch.events --profile agent --trigger T` into a fresh SQLite store and `isrwatch serve` over it (real
processes), then stall one broker after another (SIGSTOP past replica.lag.time.max.ms, then SIGCONT): the leaders
it follows shrink it out of their ISRs, and add it back once it fetches again; its own leaderships shrink and
expand as it resumes. Each ISR write is one `isr_updated` event of the writing leader's agent, read live from the
events topic; its `ts` is the leader's clock right after the ZooKeeper write.

Latency = the first wall-clock time the API shows the partition at that write's partition epoch or a later one
(GET /v1/partitions/{topic}/{partition}, polled every --poll-ms while a write is pending; the same machine, so
the same clock) - ts. The epoch identifies the write: a shrink and an expand settled in one micro-batch leave
the ISR the same, and the API never shows the shrink's ISR (counted as `superseded`).

What bounds it, and what the run prints per trigger:
  frontier   a write settles only once its cluster's frontier (newest event time - allowed_lateness_ms, 5 s)
             has passed it: a micro-batch must start at least the lateness after the write;
  trigger    then it waits for the next micro-batch, up to --trigger;
  batch      the batch's own duration (Spark, the model, the store commit), from the store's progress rows;
  poll       up to --poll-ms for the poll to see the commit.
So latency lies in [lateness + batch, lateness + trigger + batch + poll], plus the agent's delivery.

Needs Java 17 and the project's agent (`make agent`); jars come from Maven Central on first use. Prints numbers;
asserts nothing. Everything it starts (lab, job, API) stops at the end and on Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shutil
import signal
import socket
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from state.config import Config

DEFAULT_TRIGGERS = ("1s", "5s")
LATENESS_MS = Config().allowed_lateness_ms  # the job runs with the default lateness
CLUSTER = "lab"  # the cluster name the lab gives its agents
SHOWN = ("as_written", "superseded", "different_isr")  # how the API first showed a write (see `match`)


# -- arguments -------------------------------------------------------------------------------------


def parse_duration(text: str) -> float:
    """`1s`, `500ms`, `2.5` (seconds) -> seconds; the error names --trigger and the value."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s)?\s*", text)
    if not m or float(m.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a positive duration such as 1s, 500ms or 2.5")
    return float(m.group(1)) / (1000 if m.group(2) == "ms" else 1)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="isrwatch bench latency", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--trigger",
        nargs="+",
        type=parse_duration,
        default=[parse_duration(t) for t in DEFAULT_TRIGGERS],
        metavar="T",
        help=f"micro-batch intervals to measure, each a run of its own (default {' '.join(DEFAULT_TRIGGERS)})",
    )
    p.add_argument("--faults", type=int, default=10, metavar="N", help="broker stalls per trigger (default 10)")
    p.add_argument(
        "--stall",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long each stall lasts: over 1.5 x the lag plus 1 s (so every leader's isr-expiration sees it), "
        "at most 12 s (2/3 of the ZooKeeper session) (default 10)",
    )
    p.add_argument("--brokers", type=int, default=3, help="lab brokers, 3..9 (default 3)")
    p.add_argument("--lag-ms", type=int, default=5000, help="replica.lag.time.max.ms of brokers and model (5000)")
    p.add_argument("--poll-ms", type=int, default=50, help="API poll interval while a write is pending (50)")
    p.add_argument(
        "--dir",
        type=Path,
        help="work directory, kept: lab/ (lab.json, broker logs) and trigger-T/ (store, job.log, api.log); "
        "default: a temporary directory, removed at the end",
    )
    return p


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The options, checked against each other (errors name the option and the reason)."""
    p = parser()
    args = p.parse_args(list(argv))
    if args.faults < 1:
        p.error(f"--faults {args.faults}: must be >= 1")
    if not 3 <= args.brokers <= 9:
        p.error(f"--brokers {args.brokers}: must be 3..9 (the lab's topics have replication factor 3)")
    if args.lag_ms < 500:
        p.error(f"--lag-ms {args.lag_ms}: must be >= 500 (Kafka's replica.fetch.wait.max.ms)")
    if args.stall < 1.5 * args.lag_ms / 1000 + 1:
        p.error(
            f"--stall {args.stall:g}: must be >= 1.5 x --lag-ms + 1 s = {1.5 * args.lag_ms / 1000 + 1:g} s: a "
            "leader's isr-expiration runs every lag/2, so a stalled follower may stay in the ISR up to 1.5 x lag"
        )
    if args.stall > 12:
        p.error(f"--stall {args.stall:g}: must be <= 12 s: a longer stop may expire the broker's ZooKeeper session")
    if args.poll_ms < 1:
        p.error(f"--poll-ms {args.poll_ms}: must be >= 1")
    if len(set(args.trigger)) != len(args.trigger):
        p.error(f"--trigger: a value is given twice ({' '.join(f'{t:g}s' for t in args.trigger)})")
    return args


# -- the measurement, pure ---------------------------------------------------------------------------


@dataclass(frozen=True)
class IsrWrite:
    """A leader's ZooKeeper write of a partition's ISR, as its agent reported it (`isr_updated`)."""

    broker: int
    topic: str
    partition: int
    ts: int  # the broker's clock right after the write
    partition_epoch: int  # the state znode's new version
    isr: tuple[int, ...]
    kind: str  # shrink | expand

    @classmethod
    def from_event(cls, ev: dict) -> IsrWrite:
        return cls(
            ev["broker"],
            ev["topic"],
            ev["partition"],
            ev["ts"],
            ev["partition_epoch"],
            tuple(sorted(ev["isr"])),
            ev["kind"],
        )


@dataclass(frozen=True)
class View:
    """What the API answered for a partition, and the wall-clock ms its answer arrived."""

    t: int
    topic: str
    partition: int
    partition_epoch: int
    isr: tuple[int, ...]


@dataclass(frozen=True)
class Seen:
    """When the API first showed a write: `as_written` (its ISR), `superseded` (a later epoch of the partition with
    another ISR: the write and the next settled in one batch), `different_isr` (its epoch with another ISR: the model
    disagrees), or `unseen` (never, within the run)."""

    write: IsrWrite
    how: str
    seen_ms: int | None = None

    @property
    def latency_ms(self) -> int | None:
        return None if self.seen_ms is None else self.seen_ms - self.write.ts


def first_view(write: IsrWrite, views: Sequence[View], within_ms: int) -> View | None:
    """The first of a partition's views (in time order, each a change from the one before) that shows the write
    within `within_ms` of it.

    A view shows it at the write's partition epoch or a later one. Where the model's epochs trail the broker's (it
    missed a write: a `missed_by_model` divergence), a view that changed to the write's ISR after the write shows it
    too; not the first view, which is what the API showed before polling began.
    """
    for i, v in enumerate(views):
        if v.t > write.ts + within_ms:
            return None
        if v.partition_epoch >= write.partition_epoch:
            return v
        if i and v.t >= write.ts and v.isr == write.isr and v.isr != views[i - 1].isr:
            return v
    return None


def match(writes: Iterable[IsrWrite], views: Iterable[View], within_ms: int) -> list[Seen]:
    """Each write with the first view of its partition that shows it within `within_ms` (`first_view`; views in any
    order); a write not shown by then is `unseen`."""
    by_partition: dict[tuple[str, int], list[View]] = {}
    for v in sorted(views, key=lambda v: v.t):
        by_partition.setdefault((v.topic, v.partition), []).append(v)
    seen = []
    for w in writes:
        first = first_view(w, by_partition.get((w.topic, w.partition), []), within_ms)
        if first is None:
            seen.append(Seen(w, "unseen"))
        elif first.isr == w.isr:
            seen.append(Seen(w, "as_written", first.t))
        else:
            seen.append(
                Seen(w, "superseded" if first.partition_epoch > w.partition_epoch else "different_isr", first.t)
            )
    return seen


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank percentile: the smallest value with at least q % of the values at or below it."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 < q <= 100:
        raise ValueError(f"percentile {q}: must be in (0, 100]")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


@dataclass(frozen=True)
class Batch:
    """A micro-batch of the job, from the store: its start (Spark's trigger time), its duration and its commit."""

    batch_id: int
    started_ms: int
    duration_ms: int
    committed_ms: int
    watermark_ms: int | None


@dataclass(frozen=True)
class Parts:
    """A latency split at the batch that made the write visible: write -> batch start (the frontier and the
    trigger), batch start -> commit (the batch), commit -> the poll that saw it."""

    to_start_ms: int
    batch_ms: int
    to_poll_ms: int


def split(seen: Seen, batches: Sequence[Batch]) -> Parts | None:
    """The latency's parts, judged at the last batch committed before the API showed the write."""
    if seen.seen_ms is None:
        return None
    before = [b for b in batches if b.committed_ms <= seen.seen_ms]
    if not before:
        return None
    b = max(before, key=lambda b: b.committed_ms)
    return Parts(b.started_ms - seen.write.ts, b.committed_ms - b.started_ms, seen.seen_ms - b.committed_ms)


@dataclass(frozen=True)
class Divergence:
    """A divergence the job's audit recorded (agent input): where the model and a broker disagreed."""

    kind: str
    topic: str | None
    partition: int | None
    partition_epoch: int | None


def missed(seen: Iterable[Seen], divergences: Iterable[Divergence]) -> int:
    """How many writes the API never showed because the model missed them (a `missed_by_model` of that epoch)."""
    named = {(d.topic, d.partition, d.partition_epoch) for d in divergences if d.kind == "missed_by_model"}
    return sum(
        1 for s in seen if s.how == "unseen" and (s.write.topic, s.write.partition, s.write.partition_epoch) in named
    )


@dataclass
class Report:
    """One trigger's figures: the writes as the API showed them, the job's batches and divergences meanwhile."""

    trigger_s: float
    seen: list[Seen]
    batches: list[Batch]
    poll_ms: int
    sweeps_ms: list[float] = field(default_factory=list)  # how long each poll round over pending partitions took
    divergences: list[Divergence] = field(default_factory=list)

    def lines(self) -> list[str]:
        kinds = {k: [s for s in self.seen if s.write.kind == k] for k in ("shrink", "expand")}
        how = {h: sum(1 for s in self.seen if s.how == h) for h in (*SHOWN, "unseen")}
        by_kind: dict[str, int] = {}
        for d in self.divergences:
            by_kind[d.kind] = by_kind.get(d.kind, 0) + 1
        out = [
            f"trigger {self.trigger_s:g} s: {len(self.seen)} ISR writes ({len(kinds['shrink'])} shrinks, "
            f"{len(kinds['expand'])} expands); the API showed {how['as_written']} as written, {how['superseded']} "
            f"already superseded by the partition's next write, {how['different_isr']} with another ISR, "
            f"{how['unseen']} never ({missed(self.seen, self.divergences)} of them missed by the model); "
            f"divergences meanwhile: {', '.join(f'{k} {n}' for k, n in sorted(by_kind.items())) or 'none'}"
        ]
        lat = [s.latency_ms / 1000 for s in self.seen if s.latency_ms is not None]
        if lat:
            per_kind = "; ".join(
                f"{k}s p50 {percentile(v, 50):.2f} s"
                for k, ss in kinds.items()
                if (v := [s.latency_ms / 1000 for s in ss if s.latency_ms is not None])
            )
            out.append(
                f"  latency write -> API: p50 {percentile(lat, 50):.2f} s, p99 {percentile(lat, 99):.2f} s, "
                f"max {max(lat):.2f} s, min {min(lat):.2f} s over {len(lat)} writes ({per_kind})"
            )
        parts = [p for p in (split(s, self.batches) for s in self.seen) if p is not None]
        if parts:
            start = [p.to_start_ms / 1000 for p in parts]
            batch = [p.batch_ms / 1000 for p in parts]
            poll = [p.to_poll_ms for p in parts]
            out.append(
                f"  parts: write -> start of the batch that showed it p50 {percentile(start, 50):.2f} s (min "
                f"{min(start):.2f}, max {max(start):.2f}); batch start -> commit p50 {percentile(batch, 50):.2f} s "
                f"(max {max(batch):.2f}); commit -> poll p50 {percentile(poll, 50)} ms (max {max(poll)})"
            )
        durations = [b.duration_ms / 1000 for b in self.batches]
        if durations:
            lateness = LATENESS_MS / 1000
            p50, top = percentile(durations, 50), max(durations)
            sweeps = f"; a poll round took p50 {percentile(self.sweeps_ms, 50):.0f} ms" if self.sweeps_ms else ""
            out.append(
                f"  bounded by: lateness {lateness:g} s (a batch settles a write only if it starts that long after "
                f"it) + the wait for the next trigger (<= {self.trigger_s:g} s, or the running batch) + the batch "
                f"(p50 {p50:.2f} s, max {top:.2f} s over {len(durations)} batches) + the poll (<= {self.poll_ms} ms"
                f"{sweeps}): {lateness + p50:.1f}..{lateness + self.trigger_s + top + self.poll_ms / 1000:.1f} s"
            )
        return out


# -- the run -----------------------------------------------------------------------------------------


def log(message: str) -> None:
    print(f"bench latency: {message}", file=sys.stderr, flush=True)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Watch:
    """The brokers' ISR writes, read live from the events topic, and the API polled for each partition with a write
    it has not shown yet (given up on `give_up_ms` after the write: the model may have missed it)."""

    def __init__(self, bootstrap: str, topic: str, api: str, poll_ms: int, give_up_ms: int) -> None:
        self.bootstrap, self.topic, self.api, self.poll_ms, self.give_up_ms = bootstrap, topic, api, poll_ms, give_up_ms
        self.writes: list[IsrWrite] = []
        self.views: list[View] = []
        self.sweeps_ms: list[float] = []  # how long each poll round took
        self.started_ms = 0
        self._views_of: dict[tuple[str, int], list[View]] = {}  # each partition's views, in time order
        self._open: list[IsrWrite] = []  # the writes still awaited
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._threads = [threading.Thread(target=f, daemon=True) for f in (self._consume, self._poll)]

    def __enter__(self) -> Watch:
        self.started_ms = _now_ms()
        for t in self._threads:
            t.start()
        if not self._ready.wait(60):
            self.__exit__()
            raise RuntimeError(f"cannot read {self.topic} on {self.bootstrap}")
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=10)

    def pending(self) -> set[tuple[str, int]]:
        """The partitions with a write still awaited."""
        with self._lock:
            return {(w.topic, w.partition) for w in self._open}

    def count(self) -> int:
        with self._lock:
            return len(self.writes)

    def snapshot(self) -> tuple[list[IsrWrite], list[View]]:
        with self._lock:
            return list(self.writes), list(self.views)

    def _consume(self) -> None:
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False, group_id=None)
        try:
            parts = [TopicPartition(self.topic, p) for p in sorted(consumer.partitions_for_topic(self.topic) or ())]
            consumer.assign(parts)
            consumer.seek_to_end(*parts)
            for p in parts:
                consumer.position(p)  # resolve the end now: the writes from here on count
            self._ready.set()
            while not self._stop.is_set():
                for records in consumer.poll(timeout_ms=200).values():
                    for r in records:
                        if b'"isr_updated"' not in r.value:  # most events are fetches: skip them unparsed
                            continue
                        ev = json.loads(r.value)
                        if ev.get("type") == "isr_updated" and ev.get("cluster") == CLUSTER:
                            w = IsrWrite.from_event(ev)
                            with self._lock:
                                self.writes.append(w)
                                self._open.append(w)
        finally:
            consumer.close()

    def _poll(self) -> None:
        import httpx

        with httpx.Client(base_url=self.api, timeout=10) as client:
            while not self._stop.is_set():
                started = time.monotonic()
                pending = self.pending()
                for topic, partition in pending:
                    with contextlib.suppress(httpx.HTTPError, KeyError, ValueError):
                        body = client.get(f"/v1/partitions/{topic}/{partition}", params={"cluster": CLUSTER}).json()
                        view = View(_now_ms(), topic, partition, body["partition_epoch"], tuple(sorted(body["isr"])))
                        views = self._views_of.setdefault((topic, partition), [])
                        if not views or (views[-1].partition_epoch, views[-1].isr) != (view.partition_epoch, view.isr):
                            views.append(view)
                            with self._lock:
                                self.views.append(view)
                if pending:
                    self.sweeps_ms.append((time.monotonic() - started) * 1000)
                    now = _now_ms()
                    with self._lock:
                        self._open = [
                            w
                            for w in self._open
                            if now - w.ts <= self.give_up_ms
                            and first_view(w, self._views_of.get((w.topic, w.partition), []), self.give_up_ms) is None
                        ]
                self._stop.wait(max(0.0, self.poll_ms / 1000 - (time.monotonic() - started)))


def _divergences(db: Path, since_ms: int) -> list[Divergence]:
    """The divergences the job's audit recorded from `since_ms` (event time) on."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        rows = conn.execute(
            "SELECT kind, topic, partition, json_extract(record, '$.partition_epoch') FROM divergences WHERE ts >= ?",
            (since_ms,),
        ).fetchall()
    return [Divergence(*row) for row in rows]


def _batches(db: Path, since_ms: int) -> list[Batch]:
    """The job's micro-batches started from `since_ms` (wall clock) on, from its store (progress rows and commits)."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        rows = conn.execute(
            "SELECT b.batch_id, p.wall_ms, p.batch_duration_ms, b.committed_wall_ms, b.watermark_ms "
            "FROM batches b JOIN progress p ON p.batch_id = b.batch_id WHERE p.wall_ms >= ? ORDER BY b.batch_id",
            (since_ms,),
        ).fetchall()
    return [Batch(*row) for row in rows]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(what: str, check: Callable[[], bool], timeout: float, every: float = 0.5) -> bool:
    """Poll `check` until it holds; False (and a warning line) after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(every)
    log(f"warning: {what}: not within {timeout:g} s")
    return False


@contextlib.contextmanager
def _isrwatch(lab_dir: Path, work: Path, trigger_s: float, lag_ms: int) -> Iterator[str]:
    """`isrwatch run` on the lab's events topic into a fresh SQLite store, and `isrwatch serve` over it; yields
    the API's base URL once the job has read the topic's backlog. Both stop (SIGTERM, then SIGKILL) on exit."""
    import httpx

    from streaming.lab.cluster import load
    from streaming.sim.processes import Child

    lab = load(lab_dir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    store = f"sqlite:///{work / 'isrwatch.db'}"
    port = _free_port()
    cli = [sys.executable, "-m", "streaming.cli"]
    run = [
        *cli,
        "run",
        "--source",
        f"kafka:{lab.monitor_bootstrap}/{lab.events_topic}",
        "--profile",
        "agent",
        "--set",
        f"replica_lag_time_max_ms={lag_ms}",
        "--trigger",
        f"{trigger_s:g}",
        "--store",
        store,
        "--checkpoint",
        str(work / "checkpoint"),
    ]
    serve = [*cli, "serve", "--store", store, "--port", str(port), "--log-level", "warning"]
    children: list[Child] = []
    try:
        started_ms = _now_ms()
        log(f"trigger {trigger_s:g} s: starting isrwatch {' '.join(run[3:])} (log {work / 'job.log'})")
        children.append(Child("isrwatch run", run, work / "job.log"))
        children.append(Child("isrwatch serve", serve, work / "api.log"))
        base = f"http://127.0.0.1:{port}"

        def caught_up() -> bool:
            for child in children:
                if not child.alive():
                    raise RuntimeError(f"{child.name} exited ({child.proc.returncode}):\n{child.tail()}")
            with contextlib.suppress(httpx.HTTPError, ValueError):
                body = httpx.get(f"{base}/v1/partitions", params={"cluster": CLUSTER}, timeout=5).json()
                return bool(body.get("partitions")) and (body.get("as_of_ms") or 0) >= started_ms
            return False

        if not _wait("the job reading the events topic's backlog", caught_up, 300, 1.0):
            raise RuntimeError(f"the job did not catch up; last lines of its log:\n{children[0].tail()}")
        log(f"trigger {trigger_s:g} s: the job is live (frontier past its start) after {_now_ms() - started_ms} ms")
        yield base
    finally:
        for child in children:  # the job first: it commits its last batch while the API still answers
            child.stop()


def _zk_full(lab_dir: Path) -> bool:
    from streaming.lab.cluster import load, partition_states, zookeeper

    lab = load(lab_dir)
    with zookeeper(lab.zookeeper) as zk:
        states = partition_states(zk, list(lab.topics))
    return bool(states) and all(set(s.isr) == set(s.replicas) and s.leader >= 0 for s in states.values())


def measure(args: argparse.Namespace, lab_dir: Path, work: Path, trigger_s: float) -> Report:
    """One trigger: the job and the API on the running lab, --faults stalls, and what the API showed when."""
    from streaming.lab.cluster import load
    from streaming.lab.faults import stall

    lab = load(lab_dir)
    give_up_s = LATENESS_MS / 1000 + 2 * trigger_s + 20  # far longer than a write takes to reach the API
    with (
        _isrwatch(lab_dir, work, trigger_s, args.lag_ms) as api,
        Watch(lab.monitor_bootstrap, lab.events_topic, api, args.poll_ms, int(give_up_s * 1000)) as watch,
    ):
        for i in range(args.faults):
            broker = lab.brokers[i % len(lab.brokers)].id
            before = watch.count()
            step = f"trigger {trigger_s:g} s, stall {i + 1}/{args.faults}"
            log(f"{step}: broker {broker} for {args.stall:g} s")
            stall(lab_dir, broker, args.stall)
            time.sleep(args.stall)
            _wait("the brokers' ISRs full again", lambda: _zk_full(lab_dir), 60)
            full = time.monotonic()
            _wait("the API showing every write", lambda: not watch.pending(), give_up_s + 5, 0.2)
            writes, views = watch.snapshot()
            seen = match(writes[before:], views, watch.give_up_ms)
            log(
                f"{step}: {len(seen)} ISR writes, latency "
                + ", ".join(f"{s.latency_ms / 1000:.1f}" for s in seen if s.latency_ms is not None)
                + f" s; {sum(s.how == 'unseen' for s in seen)} not shown; the API was done "
                f"{time.monotonic() - full:.1f} s after the ISRs were full again"
            )
        writes, views = watch.snapshot()
        sweeps = list(watch.sweeps_ms)
    db = work / "isrwatch.db"
    return Report(
        trigger_s,
        match(writes, views, watch.give_up_ms),
        _batches(db, watch.started_ms),
        args.poll_ms,
        sweeps,
        _divergences(db, watch.started_ms),
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from streaming.lab.cluster import PROJECT_AGENT, LabError, LabSpec, down, up

    if not PROJECT_AGENT.is_file():
        log(f"error: {PROJECT_AGENT} is missing: run `make agent` first")
        return 2
    work = args.dir.resolve() if args.dir else Path(tempfile.mkdtemp(prefix="isrwatch-bench-latency-"))
    lab_dir = work / "lab"
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop everything on the way out
    reports = []
    try:
        up(lab_dir, LabSpec(brokers=args.brokers, lag_ms=args.lag_ms, agent=str(PROJECT_AGENT)), log)
        for trigger_s in args.trigger:
            reports.append(measure(args, lab_dir, work / f"trigger-{trigger_s:g}s", trigger_s))
            log("; ".join(reports[-1].lines()[:2]))
    except (LabError, RuntimeError) as exc:
        log(f"error: {exc}")
        return 1
    finally:
        if (lab_dir / "lab.json").exists():
            try:
                down(lab_dir, log)
            except LabError as exc:
                log(f"error: stopping the lab: {exc}")
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    print(
        f"{args.brokers} brokers (Kafka 3.9.2, ZooKeeper mode, isrwatch-agent), replica.lag.time.max.ms "
        f"{args.lag_ms}, {args.faults} stalls of {args.stall:g} s per trigger, allowed_lateness_ms {LATENESS_MS}, "
        f"API polled every {args.poll_ms} ms; load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    for r in reports:
        print("\n".join(r.lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
