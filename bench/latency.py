"""`isrwatch bench latency`: from a real broker's ISR write to isrwatch's API showing it.

On the lab (`isrwatch lab up --agent --kafka VERSION`: Kafka 3.9.2 brokers in ZooKeeper mode, or with --kafka 4.x
KRaft nodes, each with isrwatch-agent sending to the monitor broker's isrwatch.events), for each --trigger value:
start `isrwatch run --source kafka:<monitor>/isrwatch.events --profile agent --trigger T` into a fresh SQLite store
and `isrwatch serve` over it (real processes), then stall one broker after another (SIGSTOP past
replica.lag.time.max.ms, then SIGCONT): the leaders it follows shrink it out of their ISRs, and add it back once it
fetches again; its own leaderships may shrink and expand as it resumes. Each ISR write is one `isr_updated` event of
the writing leader's agent, read live from the events topic; its `ts` is the leader's clock right after the ZooKeeper
write. In KRaft (AlterPartition) it is the leader applying the controller's answer: a commit that reaches the leader
first through the metadata path (40-45 % of them on the lab) logs no `isr_updated` and is not measured.

Latency = the first wall-clock time the API shows the write - ts (the same machine, so the same clock). The API
shows it when the partition's history (GET /v1/partitions/{topic}/{partition}/history, polled every --poll-ms
while a write is awaited) holds the model's decision of it: same kind and resulting ISR, within one
isr-expiration interval (lag/2) of the write. The decision is committed in the same store transaction as the
ISR that GET .../isr serves. Neither the ISR alone (a shrink and an expand settled in one micro-batch leave it
unchanged: such a write counts as `superseded`) nor the partition epoch (the model's drifts from the broker's
once it misses or adds a write) identifies a write.

What bounds it, and what the run prints per trigger:
  frontier   a decision settles only once its partition's frontier has passed it: with the agent's watermarks,
             where the streams of the brokers acting on it (its leader, ISR, ELR) have passed (docs/SPEC.md §6:
             about 0.3 s behind the brokers' clocks, 0.55 s while one is away; a stall of one of them until it
             resumes, up to broker_stall_wait_ms, 18 s); the run prints each batch's frontier (the
             cluster's: the least of every broker's stream) against its start;
  trigger    then it waits for the next micro-batch: up to --trigger, or the running batch if batches take longer;
  batch      the batch's own duration (Spark, the model, the store commit), from the store's progress rows;
  poll       up to --poll-ms (or a poll round, if longer) for the poll to see the commit.
So latency <= frontier + max(trigger, batch) + batch + poll. The model decides at the
broker's check (its tick), a few ms before the write's ts, which comes after the ZooKeeper write: up to seconds
later when the broker has just resumed from a stall and its ZooKeeper session reconnects. The run prints each
latency's parts: write -> start of the batch that showed it, the batch, commit -> poll.

Needs Java 17 and the project's agent (`make agent`); jars come from Maven Central on first use. Prints numbers;
asserts nothing. Everything it starts (lab, job, API) stops at the end and on Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import sqlite3
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from isrwatch.lab.command import NEWEST_LINE, add_kafka_option
from isrwatch.state.audit import nearest_alike
from isrwatch.state.config import Config
from isrwatch.state.records import DecisionKind

from .measure import Http, free_port, percentile

DEFAULT_TRIGGERS = ("1s", "5s")
LATENESS_MS = Config().allowed_lateness_ms  # the job runs with the default lateness
CLUSTER = "lab"  # the cluster name the lab gives its agents
SEEN = ("as_written", "superseded", "unseen")  # how the API first showed a write (see `Seen`)


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
    add_kafka_option(p, NEWEST_LINE, "the lab's Kafka release")
    p.add_argument("--lag-ms", type=int, default=5000, help="replica.lag.time.max.ms of brokers and model (5000)")
    p.add_argument("--poll-ms", type=int, default=50, help="API poll interval while a write is pending (50)")
    p.add_argument(
        "--watermark-interval-ms",
        type=int,
        default=200,
        metavar="MS",
        help="the agents' watermark.interval.ms (default 200); 0: no watermarks, so the stream keeps the lateness "
        "wait alone, as before each broker had its own stream time (a baseline on the same build)",
    )
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
    if not 0 <= args.watermark_interval_ms <= 60_000:
        p.error(f"--watermark-interval-ms {args.watermark_interval_ms}: must be 0..60000 (the agent's range)")
    if len(set(args.trigger)) != len(args.trigger):
        p.error(f"--trigger: a value is given twice ({' '.join(f'{t:g}s' for t in args.trigger)})")
    return args


# -- the measurement, pure ---------------------------------------------------------------------------


@dataclass(frozen=True)
class BrokerWrite:
    """A leader's ZooKeeper write of a partition's ISR, as its agent reported it (`isr_updated`)."""

    broker: int
    topic: str
    partition: int
    ts: int  # the broker's clock right after the write
    partition_epoch: int  # the state znode's new version
    isr: tuple[int, ...]
    kind: str  # shrink | expand

    @classmethod
    def from_event(cls, ev: dict) -> BrokerWrite:
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
class Shown:
    """A decision of the model (shrink or expand) in the API's partition history, and the wall-clock ms the API
    first answered with it: the same store transaction that changed the partition's ISR."""

    t: int
    topic: str
    partition: int
    kind: str
    ts: int  # the decision's event time
    isr: tuple[int, ...]  # the ISR after it


@dataclass(frozen=True)
class Seen:
    """When the API first showed a write: `as_written` (its ISR, with the model's decision of it), `superseded` (the
    decision came with a later one of the partition in the same batch: the API never served the write's ISR), or
    `unseen` (no decision of the model matches it: it missed the write, or took longer than the run waited)."""

    write: BrokerWrite
    how: str
    seen_ms: int | None = None
    model_offset_ms: int | None = None  # the matching decision's time - the write's

    @property
    def latency_ms(self) -> int | None:
        return None if self.seen_ms is None else self.seen_ms - self.write.ts


def decision_of(write: BrokerWrite, shown: Iterable[Shown], window_ms: int, within_ms: int) -> Shown | None:
    """The model's decision of the write, among those the API showed within `within_ms` of it, paired as the audit
    pairs writes whose epochs drifted (`audit.nearest_alike`): same partition, kind and resulting ISR, the nearest
    in time within `window_ms` (ties: the first shown).

    Not by partition epoch: once the model misses or adds a write its epochs drift from the broker's (a
    `missed_by_model` / `unexplained_by_model` pair for every later write of the partition), although its decisions
    still match the broker's writes one to one.
    """
    mine = [
        d for d in shown if (d.topic, d.partition) == (write.topic, write.partition) and d.t <= write.ts + within_ms
    ]
    at = nearest_alike(
        (DecisionKind(write.kind), list(write.isr), write.ts),
        (((d.t, i), (DecisionKind(d.kind), list(d.isr), d.ts)) for i, d in enumerate(mine)),
        window_ms,
    )
    return None if at is None else mine[at[1]]


def match(writes: Iterable[BrokerWrite], shown: Sequence[Shown], window_ms: int, within_ms: int) -> list[Seen]:
    """Each write with the model's decision of it (`decision_of`) and when the API first showed that decision."""
    seen = []
    for w in writes:
        d = decision_of(w, shown, window_ms, within_ms)
        if d is None:
            seen.append(Seen(w, "unseen"))
            continue
        later = any(o.t == d.t and (o.topic, o.partition) == (d.topic, d.partition) and o.ts > d.ts for o in shown)
        seen.append(Seen(w, "superseded" if later else "as_written", d.t, d.ts - w.ts))
    return seen


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


@dataclass
class Report:
    """One trigger's figures: the writes as the API showed them, the job's batches and divergences meanwhile."""

    trigger_s: float
    seen: list[Seen]
    batches: list[Batch]
    poll_ms: int
    sweeps_ms: list[float] = field(default_factory=list)  # how long each poll round over pending partitions took
    divergences: dict[str, int] = field(default_factory=dict)  # what the job's audit recorded meanwhile, by kind
    replayed: Replayed | None = None  # the job's decisions against a one-pass replay of the same events topic

    def lines(self) -> list[str]:
        kinds = {k: [s for s in self.seen if s.write.kind == k] for k in ("shrink", "expand")}
        how = {h: sum(1 for s in self.seen if s.how == h) for h in SEEN}
        offsets = [s.model_offset_ms for s in self.seen if s.model_offset_ms is not None]
        out = [
            f"trigger {self.trigger_s:g} s: {len(self.seen)} ISR writes ({len(kinds['shrink'])} shrinks, "
            f"{len(kinds['expand'])} expands); the API showed {how['as_written']} with their ISR, {how['superseded']} "
            f"only superseded by the partition's next write in the same batch, {how['unseen']} never; "
            f"divergences meanwhile: {', '.join(f'{k} {n}' for k, n in sorted(self.divergences.items())) or 'none'}"
            + ("" if self.replayed is None else f"; {self.replayed}")
        ]
        if offsets:
            out.append(
                f"  the model's decision time - the broker's write time: p50 {percentile(offsets, 50)} ms, "
                f"min {min(offsets)} ms, max {max(offsets)} ms"
            )
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
        trails = [(b.started_ms - b.watermark_ms) / 1000 for b in self.batches if b.watermark_ms is not None]
        if durations and trails:
            p50, top = percentile(durations, 50), max(durations)
            behind = percentile(trails, 99)
            poll = max([self.poll_ms, *self.sweeps_ms]) / 1000  # a poll round may take longer than the interval
            out.append(
                f"  bounded by: the frontier (a decision settles once it passed it: where the streams of the brokers "
                f"acting on its partition have passed, or without watermarks the newest event time - "
                f"allowed_lateness_ms; each batch's cluster frontier, the least of every broker's stream, trailed its "
                f"start by p50 {percentile(trails, 50):.2f} s, p99 {behind:.2f} s, max {max(trails):.2f} s) + the "
                f"wait for the next batch (<= the trigger, {self.trigger_s:g} s, or the "
                f"running batch if longer) + the batch (p50 {p50:.2f} s, max {top:.2f} s over {len(durations)} "
                f"batches) + the poll (<= {poll * 1000:.0f} ms): at most "
                f"{behind + max(self.trigger_s, top) + top + poll:.1f} s at the cluster frontier's p99"
            )
        return out


# -- the run -----------------------------------------------------------------------------------------


def log(message: str) -> None:
    print(f"bench latency: {message}", file=sys.stderr, flush=True)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Watch:
    """The brokers' ISR writes, read live from the events topic, and the API's history of each partition with a write
    still awaited, polled (given up `give_up_ms` after the write: the model may have missed it)."""

    HISTORY = 10  # the newest decisions per poll: more than a partition's writes awaited at once

    def __init__(self, bootstrap: str, topic: str, api: str, poll_ms: int, window_ms: int, give_up_ms: int) -> None:
        self.bootstrap, self.topic, self.api, self.poll_ms = bootstrap, topic, api, poll_ms
        self.window_ms, self.give_up_ms = window_ms, give_up_ms
        self.writes: list[BrokerWrite] = []
        self.shown: list[Shown] = []
        self.sweeps_ms: list[float] = []  # how long each poll round took
        self.started_ms = 0
        self._open: list[BrokerWrite] = []  # the writes still awaited
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

    def snapshot(self) -> tuple[list[BrokerWrite], list[Shown]]:
        with self._lock:
            return list(self.writes), list(self.shown)

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
                            w = BrokerWrite.from_event(ev)
                            with self._lock:
                                self.writes.append(w)
                                self._open.append(w)
        finally:
            consumer.close()

    def _poll(self) -> None:
        known: set[tuple] = set()
        with Http(self.api, timeout=10) as client:
            while not self._stop.is_set():
                started = time.monotonic()
                pending = self.pending()
                for topic, partition in pending:
                    with contextlib.suppress(OSError, KeyError, ValueError):
                        body = client.json(
                            f"/v1/partitions/{topic}/{partition}/history",
                            {"cluster": CLUSTER, "page_size": self.HISTORY},
                        )
                        t = _now_ms()
                        for d in body["decisions"]:
                            if d["kind"] not in ("shrink", "expand"):
                                continue
                            shown = Shown(t, topic, partition, d["kind"], d["ts"], tuple(sorted(d["isr_after"])))
                            if (key := (topic, partition, shown.kind, shown.ts, shown.isr)) not in known:
                                known.add(key)
                                with self._lock:
                                    self.shown.append(shown)
                if pending:
                    self.sweeps_ms.append((time.monotonic() - started) * 1000)
                    now = _now_ms()
                    with self._lock:
                        shown_now = list(self.shown)
                        self._open = [
                            w
                            for w in self._open
                            if now - w.ts <= self.give_up_ms
                            and decision_of(w, shown_now, self.window_ms, self.give_up_ms) is None
                        ]
                self._stop.wait(max(0.0, self.poll_ms / 1000 - (time.monotonic() - started)))


def _divergences(db: Path, since_ms: int) -> dict[str, int]:
    """The divergences the job's audit recorded from `since_ms` (event time) on, by kind."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        rows = conn.execute("SELECT kind, COUNT(*) FROM divergences WHERE ts >= ? GROUP BY kind", (since_ms,))
        return dict(rows.fetchall())


def _batches(db: Path, since_ms: int) -> list[Batch]:
    """The job's micro-batches started from `since_ms` (wall clock) on, from its store (progress rows and commits)."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        rows = conn.execute(
            "SELECT b.batch_id, p.wall_ms, p.batch_duration_ms, b.committed_wall_ms, b.watermark_ms "
            "FROM batches b JOIN progress p ON p.batch_id = b.batch_id WHERE p.wall_ms >= ? ORDER BY b.batch_id",
            (since_ms,),
        ).fetchall()
    return [Batch(*row) for row in rows]


@dataclass(frozen=True)
class Replayed:
    """The job's decisions against a one-pass replay (`state.replay`) of every line of its events topic, both up to
    where the job had settled (its last batch's watermark): the stream must equal the replay (SPEC §6)."""

    lines: int
    until_ms: int
    both: int
    stream_only: int
    replay_only: int
    late: int  # the job's dead letters for lateness

    def __str__(self) -> str:
        return (
            f"stream against a replay of its events topic ({self.lines} lines, up to its watermark): "
            f"{self.both} decisions in both, {self.stream_only} only in the stream, {self.replay_only} only in the "
            f"replay; {self.late} late events"
        )


def _replayed(lab_dir: Path, db: Path) -> Replayed:
    """Read the lab's whole events topic and replay it with the job's configuration (`Lab.stream_options`: the agent
    profile at the lab's lag); compare its decisions with the job's, up to the job's last watermark."""
    import msgspec
    from kafka import KafkaConsumer, TopicPartition

    from isrwatch.lab.cluster import load
    from isrwatch.state.replay import replay

    lab = load(lab_dir)
    consumer = KafkaConsumer(bootstrap_servers=lab.monitor_bootstrap, enable_auto_commit=False, group_id=None)
    lines: list[bytes] = []
    try:
        parts = [TopicPartition(lab.events_topic, p) for p in sorted(consumer.partitions_for_topic(lab.events_topic))]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        ends = consumer.end_offsets(parts)
        while any(consumer.position(p) < ends[p] for p in parts):
            for records in consumer.poll(timeout_ms=500).values():
                lines += [r.value for r in records]
    finally:
        consumer.close()
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        until = conn.execute("SELECT watermark_ms FROM batches ORDER BY batch_id DESC LIMIT 1").fetchone()[0]
        streamed = [json.loads(r) for (r,) in conn.execute("SELECT record FROM decisions WHERE ts < ?", (until,))]
        late = conn.execute("SELECT COUNT(*) FROM dead_letters WHERE reason LIKE 'late%'").fetchone()[0]
    config = Config(replica_lag_time_max_ms=lab.replica_lag_time_max_ms).with_profile("agent")
    replayed = [msgspec.to_builtins(d) for d in replay([lines], config, until=until).decisions if d.ts < until]

    a, b = (Counter(json.dumps(r, sort_keys=True) for r in rows) for rows in (streamed, replayed))
    both = (a & b).total()
    return Replayed(len(lines), until, both, a.total() - both, b.total() - both, late)


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
def _isrwatch(lab_dir: Path, work: Path, trigger_s: float) -> Iterator[str]:
    """`isrwatch run` on the lab's events topic into a fresh SQLite store, and `isrwatch serve` over it; yields
    the API's base URL once the job has read the topic's backlog. Both stop (SIGTERM, then SIGKILL) on exit."""
    from isrwatch.lab.record import load
    from isrwatch.processes.child import Child

    lab = load(lab_dir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    store = f"sqlite:///{work / 'isrwatch.db'}"
    port = free_port()
    cli = [sys.executable, "-m", "isrwatch.cli"]
    run = [
        *cli,
        "run",
        *lab.stream_options(),
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
            with contextlib.suppress(OSError, ValueError), Http(base, timeout=5) as api:
                body = api.json("/v1/partitions", {"cluster": CLUSTER})
                return bool(body.get("partitions")) and (body.get("as_of_ms") or 0) >= started_ms
            return False

        if not _wait("the job reading the events topic's backlog", caught_up, 300, 1.0):
            raise RuntimeError(f"the job did not catch up; last lines of its log:\n{children[0].tail()}")
        log(f"trigger {trigger_s:g} s: the job is live (frontier past its start) after {_now_ms() - started_ms} ms")
        yield base
    finally:
        for child in children:  # the job first: it commits its last batch while the API still answers
            child.stop()


def _full(lab_dir: Path) -> bool:
    """Every partition has a leader and its full ISR, as the cluster says (ZooKeeper, or KRaft's admin API)."""
    from isrwatch.lab.record import load
    from isrwatch.lab.truth import partitions

    states = partitions(load(lab_dir))
    return bool(states) and all(set(s.isr) == set(s.replicas) and s.leader >= 0 for s in states.values())


def measure(args: argparse.Namespace, lab_dir: Path, work: Path, trigger_s: float) -> Report:
    """One trigger: the job and the API on the running lab, --faults stalls, and what the API showed when."""
    from isrwatch.lab.faults import stall
    from isrwatch.lab.record import load

    lab = load(lab_dir)
    give_up_s = LATENESS_MS / 1000 + 2 * trigger_s + 20  # far longer than a write takes to reach the API
    window_ms = args.lag_ms // 2  # the model's decision and the broker's write: at most one isr-expiration apart
    with (
        _isrwatch(lab_dir, work, trigger_s) as api,
        Watch(lab.monitor_bootstrap, lab.events_topic, api, args.poll_ms, window_ms, int(give_up_s * 1000)) as watch,
    ):
        for i in range(args.faults):
            broker = lab.brokers[i % len(lab.brokers)].id
            before = len(watch.snapshot()[0])
            step = f"trigger {trigger_s:g} s, stall {i + 1}/{args.faults}"
            log(f"{step}: broker {broker} for {args.stall:g} s")
            stall(lab_dir, broker, args.stall)
            time.sleep(args.stall)
            _wait("the brokers' ISRs full again", lambda: _full(lab_dir), 60)
            full = time.monotonic()
            _wait("the API showing every write", lambda: not watch.pending(), give_up_s + 5, 0.2)
            writes, shown = watch.snapshot()
            seen = match(writes[before:], shown, window_ms, watch.give_up_ms)
            log(
                f"{step}: {len(seen)} ISR writes, latency "
                + ", ".join(f"{s.latency_ms / 1000:.1f}" for s in seen if s.latency_ms is not None)
                + f" s; {sum(s.how == 'unseen' for s in seen)} not shown; the API was done "
                f"{time.monotonic() - full:.1f} s after the ISRs were full again"
            )
        writes, shown = watch.snapshot()
        sweeps = list(watch.sweeps_ms)
    db = work / "isrwatch.db"
    return Report(
        trigger_s,
        match(writes, shown, window_ms, watch.give_up_ms),
        _batches(db, watch.started_ms),
        args.poll_ms,
        sweeps,
        _divergences(db, watch.started_ms),
        _replayed(lab_dir, db),
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from isrwatch.lab.cluster import down, up
    from isrwatch.lab.config import LabSpec
    from isrwatch.lab.jars import default_agent
    from isrwatch.lab.record import KRAFT, LabError

    if not default_agent().is_file():
        log(f"error: {default_agent()} is missing: run `make agent` first")
        return 2
    work = args.dir.resolve() if args.dir else Path(tempfile.mkdtemp(prefix="isrwatch-bench-latency-"))
    lab_dir = work / "lab"
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop everything on the way out
    reports = []
    ran = "no lab"
    try:
        spec = LabSpec(
            brokers=args.brokers,
            lag_ms=args.lag_ms,
            agent=str(default_agent()),
            kafka=args.kafka,
            agent_options=(("watermark.interval.ms", str(args.watermark_interval_ms)),),
        )
        lab = up(lab_dir, spec, log)
        ran = f"Kafka {lab.kafka_version}, {'KRaft' if lab.mode == KRAFT else 'ZooKeeper mode'}, isrwatch-agent"
        for trigger_s in args.trigger:
            reports.append(measure(args, lab_dir, work / f"trigger-{trigger_s:g}s", trigger_s))
            log("; ".join(reports[-1].lines()[:2]))
    except (LabError, RuntimeError) as exc:
        log(f"error: {exc}")
        return 1
    except KeyboardInterrupt:
        log("interrupted: stopping the job, the API and the lab")
        return 130
    finally:
        if (lab_dir / "lab.json").exists():
            try:
                down(lab_dir, log)
            except LabError as exc:
                log(f"error: stopping the lab: {exc}")
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    print(
        f"{args.brokers} brokers ({ran}), replica.lag.time.max.ms "
        f"{args.lag_ms}, {args.faults} stalls of {args.stall:g} s per trigger, allowed_lateness_ms {LATENESS_MS}, "
        f"watermark.interval.ms {args.watermark_interval_ms}, "
        f"API polled every {args.poll_ms} ms; load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    for r in reports:
        print("\n".join(r.lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
