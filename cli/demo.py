"""`isrwatch demo`: the whole pipeline on one machine, in one command.

A simulated cluster plays a scripted fault story in real time into rotating JSONL files; the
streaming job (`isrwatch run`, local Spark, SQLite store) judges it; the API (`isrwatch serve`)
serves the status page. The terminal shows the URLs and a live summary read from the API. Ctrl-C
(or --duration) stops the simulator, then the job, then the API; the children run in their own
sessions and die with the demo even if it is killed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from isrwatch.cli.simulate import with_isr_protocol
from isrwatch.lab.command import add_kafka_option
from isrwatch.processes.child import Child
from isrwatch.sim.config import SimConfig
from isrwatch.sim.faults import Fault, scenario
from isrwatch.sim.model import simulate_events
from isrwatch.sim.pacing import Pacer, run
from isrwatch.sim.sinks import DirectorySink
from isrwatch.state.config import ALTER_PARTITION, ISR_PROTOCOLS, ZOOKEEPER, Config, ConfigError
from isrwatch.store import default_store, open_store

from .common import add_store_argument

REPLICA_FETCH_WAIT_MAX_MS = 500  # Kafka's lower bound of replica.lag.time.max.ms
# --real: a light producer load, enough that a follower that stops fetching falls behind on every partition. Each
# fetch that brings new data is an agent event, so the lab's default 200 records/s makes ~300 events/s, more than
# the streaming job keeps up with on a busy 2-core machine; 20 records/s makes the story show within seconds.
REAL_RATE = 20
DEFAULT_LAG_MS = 6000  # --real's replica.lag.time.max.ms: the longest the story allows (story.MAX_LAG_MS)
REAL_MAX_PER_BATCH = 5000  # Kafka records per micro-batch: the backlog of the job's start comes in small batches
# A short lag so the story plays in minutes: a stalled follower is removed 10-15 s after it stops.
DEMO_KAFKA = {"replica_lag_time_max_ms": 10_000, "min_insync_replicas_by_topic": {"orders": 2, "payments": 2}}
# --isr-protocol: the simulator's preset story for each way of writing an ISR.
STORIES = {ZOOKEEPER: "story", ALTER_PARTITION: "stuck-queue"}
STUCK_MS = 5000  # an AlterPartition request unanswered this long is news (the controller answers in ~20 ms)
# The stream has caught up with the events of its start (the lab's, in --real) once its watermark is this close to
# the wall clock: the lateness (5 s) plus a batch or two; the real story's first fault waits for it.
CAUGHT_UP_S = 15.0


class Api:
    """The JSON API as the terminal summary reads it (stdlib HTTP: nothing to install)."""

    def __init__(self, base: str) -> None:
        self.base = base

    def get(self, path: str, **params: Any) -> dict | None:
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        try:
            with urllib.request.urlopen(f"{self.base}{path}{'?' + query if query else ''}", timeout=5) as r:
                return json.load(r)
        except (urllib.error.URLError, OSError, ValueError):
            return None


def _offset(ms: int, start: int) -> str:
    """`ms` after `start` as +m:ss.s, rounded to the tenth first so that 59.97 s reads +1:00.0, not +0:60.0."""
    tenths = round((ms - start) / 100)
    return f"+{tenths // 600}:{tenths % 600 / 10:04.1f}"


def _clock(ms: int | None) -> str:
    """Event time as the status page shows it (its `clock`: local HH:MM:SS.mmm), so a terminal line and the page's
    rows and timeline read on one clock."""
    if ms is None:
        return "-"
    return time.strftime("%H:%M:%S", time.localtime(ms // 1000)) + f".{ms % 1000:03d}"


def _many(n: int, thing: str) -> str:
    return f"{n} {thing}{'' if n == 1 else 's'}"


def story_lines(faults: list[Fault], kafka: Config, session_timeout_ms: int, start_ms: int) -> list[str]:
    """What the audience will see, at the event time the page will show (`start_ms` plus each fault's time, with
    that offset; faults may overlap: told in time order)."""
    lag = kafka.replica_lag_time_max_ms / 1000
    if kafka.alter_partition:
        shrink = (
            f"shrink ({{}}) proposed {lag:g}-{lag * 1.5:g} s later: its leader's AlterPartition request, "
            "committed when the controller answers"
        )
        expand = "expand proposed and committed"
    else:
        shrink = (
            f"shrink ({{}}) {lag:g}-{lag * 1.5:g} s later; its leader's ISR-change batch 5-7.5 s after that "
            "(linger), or at its next 2.5 s check if it sent none for 60 s (max_delay)"
        )
        expand = "expand, batch"
    lines: list[tuple[int, str]] = []

    def tell(ms: int | None, text: str) -> None:
        if ms is not None:  # a fault without an end has none to tell
            lines.append((ms, f"{_clock(start_ms + ms)} ({_offset(ms, 0)})  {text}"))

    for f in faults:
        at, until = f.start_ms, f.end_ms
        if f.kind == "stall":
            tell(at, f"broker {f.broker} stalls: its followers stop fetching -> {shrink.format('stuck')}")
            tell(until, f"broker {f.broker} resumes fetching: its followers catch up -> {expand}")
        elif f.kind == "slow":
            tell(at, f"broker {f.broker} turns slow: it fetches but falls behind -> {shrink.format('slow')}")
            tell(until, f"broker {f.broker} keeps up again -> {expand}")
        elif f.kind == "crash":
            tell(
                at,
                f"broker {f.broker} crashes; {session_timeout_ms / 1000:g} s later the controller "
                "moves its leaderships and drops it from every ISR (LeaderAndIsr)",
            )
            tell(until, f"broker {f.broker} restarts and catches up -> expand")
        elif f.kind == "elect":
            tell(at, "preferred leader election: leadership goes back (LeaderAndIsr)")
        elif f.kind == "failover":
            tell(
                at,
                "controller failover: every leader rejects the new controller's re-sent state "
                f"and {f.stale} late requests of the old one (STALE_CONTROLLER_EPOCH)",
            )
        elif f.kind == "stuck-controller":
            tell(
                at,
                f"the controller stops answering broker {f.broker}'s AlterPartition requests: its next request "
                "stays in flight, its partitions stay pending (no shrink, no expand), later proposals queue behind it",
            )
            tell(until, "the answers arrive: the request commits, the queue goes at once and commits")
        elif f.kind == "fence":
            tell(
                at,
                f"the controller fences broker {f.broker}: a proposal adding it gets INELIGIBLE_REPLICA; the "
                f"leaders learn of the fence {f.notice_ms / 1000:g} s later",
            )
            tell(until, f"broker {f.broker} is unfenced: it may join ISRs again")
    return [text for _, text in sorted(lines, key=lambda line: line[0])]


class Summary:
    """Prints what changed since the last look: ISR decisions (or proposals and their answers), batches, partition
    health, all at the event time the status page shows (`_clock`)."""

    def __init__(self, api: Api, start_ms: int, say: Callable[[str], None], metadata: bool = False) -> None:
        self.api = api
        self.start = start_ms
        self.say = say
        # KRaft's controller changes a partition with metadata records, not a LeaderAndIsr request.
        self.controller_word = "METADATA" if metadata else "LEADER_AND_ISR"
        self.last_decision_ts = start_ms
        self.last_batch_ts = start_ms
        self.last_divergence_ts = start_ms
        self.last_answer_ts = start_ms
        self.stuck: dict[int, tuple[int, int, int]] = {}  # broker -> (in-flight partitions, queue, age) last told
        self.proposers: set[tuple[str, int]] = set()  # leader brokers that propose with AlterPartition
        self.refusals: dict[tuple[int, str], Refusals] = {}  # (broker, error) -> a run of refusals not told yet
        self.again: dict[tuple, tuple[int, int]] = {}  # this look's proposals -> (repeats, last time)
        self.incidents: dict[str, bool] = {}  # incident id -> whether its close was told
        self.health: tuple | None = None
        self.said_health_at = 0.0
        self.ready = False
        self.first_batch = threading.Event()  # set with `ready`
        self.caught_up = threading.Event()  # and once the stream is CAUGHT_UP_S or less behind: the real story waits
        self.counts = {
            "shrink": 0,
            "expand": 0,
            "leader_and_isr": 0,
            "rejected": 0,
            "batches": 0,
            "divergences": 0,
            "requests": 0,
            "proposed": 0,
            "committed": 0,
            "refused": 0,
        }

    def tick(self) -> None:
        page = self.api.get("/v1/partitions", page_size=1000)
        if page is None or not page["partitions"]:
            return  # no micro-batch has applied the controller's first LeaderAndIsr yet
        if not self.ready:
            self.ready = True
            self.first_batch.set()
            self.say("the streaming job committed its first micro-batch; the status page is live")
        if not self.caught_up.is_set():
            lag = (self.api.get("/readyz") or {}).get("watermark_lag_seconds")
            if lag is not None and lag <= CAUGHT_UP_S:
                self.caught_up.set()
        self._news()
        parts = page["partitions"]
        health = tuple(sum(p[flag] for p in parts) for flag in ("under_replicated", "under_min_isr", "offline"))
        if health != self.health or time.monotonic() - self.said_health_at > 30:
            self.health = health
            self.said_health_at = time.monotonic()
            self.say(
                f"watermark {_clock(page['as_of_ms'])}: {len(parts)} partitions, "
                f"{health[0]} under-replicated, {health[1]} under min ISR, {health[2]} offline"
            )

    def _news(self) -> None:
        """New decisions, batches and AlterPartition answers, told in event-time order (a batch or an answer after
        the changes it carries)."""
        brokers = (self.api.get("/v1/brokers") or {}).get("brokers", [])
        self.proposers.update((b["cluster"], b["broker"]) for b in brokers if "queue_size" in b)
        decisions = self.api.get("/v1/decisions", since=self.last_decision_ts + 1, page_size=500) or {}
        batches = self.api.get("/v1/propagations", since=self.last_batch_ts + 1, page_size=500) or {}
        answers = self.api.get("/v1/alter-partitions", since=self.last_answer_ts + 1, page_size=500) or {}
        news = sorted(
            [(d["ts"], 0, d) for d in decisions.get("decisions", [])]
            + [(b["ts"], 1, b) for b in batches.get("propagations", [])]
            + [(r["response_ms"], 2, r) for r in answers.get("alter_partitions", [])]
            + self._incidents(),
            key=lambda n: n[:2],
        )
        controller: dict[str, list[str]] = {}
        refused: set[tuple[int, str]] = set()
        self.again.clear()
        for ts, what, item in news:
            if what == 3:
                self._incident(ts, item)
                continue
            if what == 1:
                self.last_batch_ts = ts
                self._batch(item)
                continue
            if what == 2:
                self.last_answer_ts = ts
                refused.update(self._answer(item))
                continue
            self.last_decision_ts = ts
            if item["kind"] in ("shrink", "expand"):
                self._isr_change(item)
            else:
                self.counts[item["kind"]] += 1
                outcome = f"rejected ({item['error']})" if item["error"] else "accepted"
                controller.setdefault(outcome, []).append(f"{item['topic']}-{item['partition']}")
        for (_, leader, name, kind, *_), (count, last) in self.again.items():
            if not count:
                continue
            self.say(f"  PROPOSE {kind} {name} by leader {leader} again, {count} more times until {_clock(last)}")
        for outcome, names in controller.items():
            self.say(f"  {self.controller_word}  {len(names)} {outcome}: {_listed(names)}")
        # A run of refusals is told once, when a look brings no more of it.
        for key in [key for key in self.refusals if key not in refused]:
            self.refusals.pop(key).tell(self.say, key)
        self._divergences()
        self._stuck(brokers)

    def _divergences(self) -> None:
        """Where the model and a broker disagreed (only with broker-reported input: `demo --real`)."""
        page = self.api.get("/v1/divergences", since=self.last_divergence_ts + 1, page_size=500) or {}
        for d in sorted(page.get("divergences", []), key=lambda d: d["ts"]):
            self.last_divergence_ts = max(self.last_divergence_ts, d["ts"])
            self.counts["divergences"] += 1
            where = f"{d['topic']}-{d['partition']}" if d["topic"] is not None else "its batch"
            self.say(
                f"  AUDIT   broker {d['broker']} {d['subject']} {where}: {d['kind']} "
                f"(at {_clock(d['ts'])}; /v1/divergences)"
            )

    def _stuck(self, brokers: list[dict]) -> None:
        """A broker's AlterPartition request the controller has left unanswered for STUCK_MS, with the queue behind
        it: told again when either grows, or every 10 s more (SPEC §4.9; ZooKeeper-mode leaders have no queue)."""
        for b in brokers:
            age = b.get("in_flight_age_ms")
            if age is None or age < STUCK_MS:
                self.stuck.pop(b["broker"], None)
                continue
            told = self.stuck.get(b["broker"])
            now = (b["in_flight_partitions"], b["queue_size"], age)
            if told is not None and now[:2] == told[:2] and age - told[2] < 10_000:
                continue
            self.stuck[b["broker"]] = now
            self.say(
                f"  STUCK   broker {b['broker']}'s AlterPartition request ({_many(now[0], 'partition')}) unanswered "
                f"for {age / 1000:.0f} s, {_many(now[1], 'proposal')} queued behind it "
                "(/v1/partitions?state=isr_pending)"
            )

    def _incidents(self) -> list[tuple[int, int, dict]]:
        """The news of incidents (SPEC §8) not told yet: each once when it opens and once when it closes, at its time
        (told after the decisions of the same time)."""
        page = self.api.get("/v1/incidents", since=self.start, page_size=100) or {}
        news = []
        for i in page.get("incidents", []):
            if i["id"] not in self.incidents:
                news.append((i["opened_ms"], 3, {"what": "opened", "incident": i}))
            if i["closed_ms"] is not None and not self.incidents.get(i["id"]):
                news.append((i["closed_ms"], 3, {"what": "closed", "incident": i}))
        return news

    def _incident(self, ts: int, news: dict) -> None:
        """One INCIDENT line with the incident's summary as it stands now."""
        i = news["incident"]
        self.incidents[i["id"]] = news["what"] == "closed"
        self.say(f"  INCIDENT {news['what']}  {i['kind']} at {_clock(ts)}: {i['summary']}")

    def _answer(self, r: dict) -> set[tuple[int, str]]:
        """The controller's answer to one AlterPartition request: a COMMIT line for what it committed; its refusals
        join their broker's run of the same error (`Refusals`), told once. Returns the (broker, error) runs fed."""
        self.counts["requests"] += 1
        took = r["response_ms"] - r["sent_ms"]
        committed = [p for p in r["partitions"] if not p["error"]]
        self.counts["committed"] += len(committed)
        if committed:
            outcomes = ", ".join(
                f"{p['topic']}-{p['partition']} [{','.join(map(str, p['committed_isr']))}] "
                f"epoch {p['committed_partition_epoch']}"
                for p in committed
            )
            self.say(
                f"  COMMIT  broker {r['broker']}'s request answered after "
                f"{f'{took} ms' if took < 1000 else f'{took / 1000:.1f} s'}: {outcomes} (at {_clock(r['response_ms'])})"
            )
        fed = set()
        for p in r["partitions"]:
            if p["error"]:
                self.counts["refused"] += 1
                key = (r["broker"], p["error"])
                self.refusals.setdefault(key, Refusals(r["response_ms"])).add(r["response_ms"], p)
                fed.add(key)
        return fed

    def _isr_change(self, d: dict) -> None:
        """A leader's shrink or expand: written at once in ZooKeeper mode; with AlterPartition only proposed, its
        COMMIT or REFUSED line follows with the controller's answer (SPEC §4.9)."""
        name = f"{d['topic']}-{d['partition']}"
        isr = f"[{','.join(map(str, d['isr_before']))}] -> [{','.join(map(str, d['isr_after']))}]"
        if d["kind"] == "shrink":
            why = ", ".join(f"replica {r} {reason}" for r, reason in d["reasons"].items())
        else:
            why = f"replica {d['replicas_changed'][0]} caught up"
        if (d["cluster"], d["leader"]) in self.proposers:
            self.counts["proposed"] += 1
            # The same proposal again (a leader re-proposes what the controller refused) is told once per look.
            key = (d["cluster"], d["leader"], name, d["kind"], isr, why)
            if key in self.again:
                self.again[key] = (self.again[key][0] + 1, d["ts"])
                return
            self.again[key] = (0, d["ts"])
            label = f"PROPOSE {d['kind']}"
        else:
            self.counts[d["kind"]] += 1
            label = d["kind"].upper()
        self.say(f"  {label}  {name:<12} {isr:<18} {why}  (leader {d['leader']}, at {_clock(d['ts'])})")

    def _batch(self, b: dict) -> None:
        self.counts["batches"] += 1
        names = ", ".join(f"{p['topic']}-{p['partition']}" for p in b["partitions"])
        delay = (
            ""
            if b["first_change_ts"] is None
            else f", {(b['ts'] - b['first_change_ts']) / 1000:.1f} s after the first change"
        )
        self.say(f"  BATCH   broker {b['broker']} propagated {names} ({b['trigger']}{delay}, at {_clock(b['ts'])})")

    def finish(self) -> None:
        """Tell the runs of refusals the last look left untold."""
        for key, refusals in sorted(self.refusals.items()):
            refusals.tell(self.say, key)
        self.refusals.clear()

    def outcome(self, alter_partition: bool) -> str:
        """The closing count: ISR writes, or proposals by how they ended; the controller's changes by its word."""
        c = self.counts
        changes = (
            f"{c['proposed']} ISR changes proposed ({c['committed']} committed, {c['refused']} refused)"
            if alter_partition
            else f"{c['shrink']} shrinks, {c['expand']} expands"
        )
        word = "metadata changes" if self.controller_word == "METADATA" else "LeaderAndIsr"
        return f"{changes}, {c['leader_and_isr']} {word} accepted, {c['rejected']} rejected"


class Refusals:
    """One broker's run of AlterPartition answers with the same error, told as one line when it ends: "broker 3: 80
    answers STALE_BROKER_EPOCH in 6.0 s"."""

    def __init__(self, at: int) -> None:
        self.first = self.last = at
        self.count = 0
        self.partitions: list[str] = []

    def add(self, at: int, item: dict) -> None:
        self.count += 1
        self.last = max(self.last, at)
        name = f"{item['topic']}-{item['partition']}"
        if name not in self.partitions:
            self.partitions.append(name)

    def tell(self, say: Callable[[str], None], key: tuple[int, str]) -> None:
        broker, error = key
        span = f" in {(self.last - self.first) / 1000:.1f} s" if self.count > 1 else ""
        say(
            f"  REFUSED broker {broker}: {_many(self.count, 'answer')} {error}{span}, the ISR stays as committed: "
            f"{_listed(self.partitions)} (at {_clock(self.first)})"
        )


def _listed(names: list[str]) -> str:
    return ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")


def _fresh(workdir: Path, store_url: str) -> None:
    """A fresh run every time: the story starts now, so old events, state and decisions would only confuse it.

    The store is emptied only if an earlier demo in `workdir` wrote it (its job's checkpoint is ours); a store that
    anything else wrote is refused, never emptied."""
    checkpoint = workdir / "checkpoint"
    with open_store(store_url) as store:
        last, job = store.last_batch_id(), store.holder()
        if last is not None and (job is None or job.get("checkpoint") != str(checkpoint.resolve())):
            writer = "a replay" if job is None else f"job {job.get('job')} (checkpoint {job.get('checkpoint')})"
            raise ConfigError(
                f"--store {store_url}: holds batches up to {last} of {writer}, not of an earlier demo in {workdir}; "
                f"the demo plays its story on an empty store: give it another (--store sqlite:///{workdir}/isrwatch.db)"
            )
        store.clear()
    for name in ("events", "checkpoint"):
        shutil.rmtree(workdir / name, ignore_errors=True)
    workdir.mkdir(parents=True, exist_ok=True)


def _browse_again(store_url: str) -> str:
    """The command that serves the demo's store again."""
    return "isrwatch serve" + ("" if store_url == default_store() else f" --store {store_url}")


def _start_job_and_api(workdir: Path, store: str, port: int, source: list[str], children: list[Child]) -> None:
    """`isrwatch run` (2 s micro-batches) on `source` into the store, and `isrwatch serve` over it."""
    cli = [sys.executable, "-m", "isrwatch.cli"]  # the children run the same isrwatch
    job = [*cli, "run", *source, "--store", store, "--checkpoint", str(workdir / "checkpoint"), "--trigger", "2"]
    children.append(Child("streaming job", job, workdir / "job.log"))
    api = [*cli, "serve", "--store", store, "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    children.append(Child("API", api, workdir / "api.log"))


def _watch(
    children: list[Child], summary: Summary, say: Callable[[str], None], stop: threading.Event, deadline: float | None
) -> int:
    """The live summary every 2 s until Ctrl-C, a stop signal, --duration or a child that died (exit 1)."""
    code = 0
    while not stop.is_set():
        for child in children:
            if not child.alive():
                say(
                    f"the {child.name} stopped unexpectedly (exit {child.proc.returncode}); "
                    f"last lines of {child.log_path}:\n{child.tail()}"
                )
                code = 1
                stop.set()
        if stop.is_set() or (deadline is not None and time.monotonic() >= deadline):
            break
        summary.tick()
        stop.wait(2.0)
    return code


def _stop_on_signals(stop: threading.Event) -> None:
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())


def _narrator() -> Callable[[str], None]:
    """Print each line with the wall clock it is said at, [HH:MM:SS] on the clock of the page's times (`_clock`)."""

    def say(message: str) -> None:
        print(f"[{_clock(int(time.time() * 1000))[:8]}] {message}", flush=True)

    return say


def main(args: argparse.Namespace) -> int:
    if args.real:
        if args.isr_protocol is not None:
            raise ConfigError(
                f"--isr-protocol {args.isr_protocol}: not with --real (the real brokers' way comes from --kafka: "
                "3.9 runs ZooKeeper mode, 4.x KRaft with AlterPartition)"
            )
        return real_main(args)
    for name, value in (("--lag-ms", args.lag_ms), ("--lab-dir", args.lab_dir), ("--kafka", args.kafka)):
        if value is not None:
            raise ConfigError(f"{name}: only with --real (a story on real brokers)")
    if args.speed <= 0:
        raise ConfigError("--speed: must be > 0 (the demo runs in real time, or faster)")
    workdir = Path(args.dir)
    base = f"http://127.0.0.1:{args.port}"
    started = time.monotonic()
    say = _narrator()
    _fresh(workdir, args.store)
    (workdir / "events").mkdir(parents=True)
    start = int(time.time() * 1000)
    protocol = args.isr_protocol or ZOOKEEPER
    kafka = with_isr_protocol(Config.from_dict({**DEMO_KAFKA, "schedule_origin_ms": start}), protocol, [])
    (workdir / "config.json").write_text(kafka.to_json() + "\n")
    story = scenario(STORIES[protocol], kafka)
    sim = SimConfig(kafka=kafka, start_ms=start, duration_ms=None)
    store = args.store

    print(
        f"isrwatch demo: a simulated {sim.brokers}-broker Kafka cluster"
        + (f" (Kafka {kafka.kafka_version}, AlterPartition)" if kafka.alter_partition else "")
        + ", the streaming job and the API, all on this machine.\n"
        f"  status page   {base}/\n"
        f"  API           {base}/docs   metrics {base}/metrics\n"
        f"  files         {workdir}/ (events/, job.log, api.log), store {store}\n"
        "The story (event time, as the status page shows it"
        f"{f'; played {args.speed:g}x faster' if args.speed != 1 else ''}; "
        f"replica.lag.time.max.ms = {kafka.replica_lag_time_max_ms / 1000:g} s):",
        flush=True,
    )
    for line in story_lines(list(story.faults), kafka, sim.zookeeper_session_timeout_ms, start):
        print(f"  {line}", flush=True)
    print("Press Ctrl-C to stop.", flush=True)

    stop = threading.Event()
    _stop_on_signals(stop)
    children: list[Child] = []
    pacer = Pacer(args.speed, None, start)
    feeder = threading.Thread(
        target=run,
        name="simulator",
        daemon=True,
        args=(
            simulate_events(sim, story.faults, args.seed),
            # Files dated by the story's clock: at --speed 2 its events run ahead of the wall clock, not of it.
            DirectorySink(workdir / "events", 1000, pacer.now_ms),
            pacer,
            stop.is_set,
        ),
    )
    summary = Summary(Api(base), start, say)
    code = 0
    try:
        source = ["--source", f"files:{workdir / 'events'}", "--config", str(workdir / "config.json")]
        _start_job_and_api(workdir, store, args.port, source, children)
        feeder.start()
        say("simulator started; the streaming job is starting Spark (10-20 s)...")
        code = _watch(children, summary, say, stop, None if args.duration is None else started + args.duration)
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        say("stopping: simulator, streaming job, API...")
        if feeder.is_alive():
            feeder.join(timeout=10)
        for child in children:  # the job first, so the page keeps answering while it stops
            child.stop()
    c = summary.counts
    written = (
        f"{c['requests']} AlterPartition requests answered"
        if kafka.alter_partition
        else f"{c['batches']} ISR-change batches"
    )
    summary.finish()
    say(
        f"stopped. {summary.outcome(kafka.alter_partition)}, {written}. The store stays in {store}: browse it again "
        f"with `{_browse_again(store)}`."
    )
    return code


def _attached_lab(args: argparse.Namespace) -> tuple[Path, int]:
    """--lab-dir: a running lab whose brokers run isrwatch-agent; the story plays at the lab's own lag."""
    from isrwatch.lab.record import LAB_JSON, LabError, load

    if not (Path(args.lab_dir) / LAB_JSON).is_file():
        raise ConfigError(f"--lab-dir {args.lab_dir}: no lab there (start one: isrwatch lab up --agent --dir DIR)")
    try:
        lab = load(Path(args.lab_dir))
    except LabError as exc:
        raise ConfigError(f"--lab-dir {args.lab_dir}: {exc}") from None
    if not lab.running():
        raise ConfigError(f"--lab-dir {args.lab_dir}: the lab there is not running (isrwatch lab up --agent)")
    if lab.agent is None:
        raise ConfigError(f"--lab-dir {args.lab_dir}: its brokers run no isrwatch-agent (isrwatch lab up --agent)")
    if args.lag_ms is not None and args.lag_ms != lab.replica_lag_time_max_ms:
        raise ConfigError(
            f"--lag-ms {args.lag_ms}: the lab in {args.lab_dir} runs with replica.lag.time.max.ms "
            f"{lab.replica_lag_time_max_ms}; leave --lag-ms out with --lab-dir"
        )
    return Path(lab.dir), lab.replica_lag_time_max_ms


def real_main(args: argparse.Namespace) -> int:
    """`isrwatch demo --real`: the story on the lab's real brokers, each with isrwatch-agent, read by the streaming
    job from the monitor broker's events topic. With --lab-dir, on a lab already running there, left running."""
    from isrwatch.lab import story
    from isrwatch.lab.cluster import down, up
    from isrwatch.lab.config import ZOOKEEPER_SESSION_TIMEOUT_MS, LabSpec
    from isrwatch.lab.jars import KAFKA_NEWEST, ZOOKEEPER_RELEASE, JarsError, default_agent, kafka_release
    from isrwatch.lab.kraft import BROKER_SESSION_TIMEOUT_MS
    from isrwatch.lab.record import LAB_JSON, ZOOKEEPER, LabError, load

    workdir = Path(args.dir)
    attached = args.lab_dir is not None
    if attached and args.kafka is not None:
        raise ConfigError(
            f"--kafka {args.kafka}: the lab in {args.lab_dir} runs its own; leave --kafka out with --lab-dir"
        )
    try:
        release = kafka_release(args.kafka or KAFKA_NEWEST)
    except JarsError as exc:
        raise ConfigError(str(exc)) from None
    if attached:
        lab_dir, lag_ms = _attached_lab(args)
        release = load(lab_dir).kafka_version
    else:
        lab_dir, lag_ms = (workdir / "lab").resolve(), DEFAULT_LAG_MS if args.lag_ms is None else args.lag_ms
    if not REPLICA_FETCH_WAIT_MAX_MS <= lag_ms <= story.MAX_LAG_MS:
        raise ConfigError(
            f"--lag-ms {lag_ms}{' (the lab in --lab-dir)' if attached else ''}: must be "
            f"{REPLICA_FETCH_WAIT_MAX_MS}..{story.MAX_LAG_MS}: the stall must outlast "
            "1.5 x the lag to be shrunk, and stay within 12 s (2/3 of the brokers' ZooKeeper session; in KRaft, well "
            "within broker.session.timeout.ms, so that the stall is no fence)"
        )
    mode = ZOOKEEPER if release == ZOOKEEPER_RELEASE else "kraft"
    session_ms = ZOOKEEPER_SESSION_TIMEOUT_MS if mode == ZOOKEEPER else BROKER_SESSION_TIMEOUT_MS
    base = f"http://127.0.0.1:{args.port}"
    started = time.monotonic()
    say = _narrator()
    _fresh(workdir, args.store)
    store = args.store
    print(
        f"isrwatch demo --real: {'the lab in ' + str(lab_dir) + ': ' if attached else ''}Kafka {release} brokers "
        f"({'ZooKeeper mode' if mode == ZOOKEEPER else 'KRaft, AlterPartition'}) on loopback, each with "
        "isrwatch-agent, the streaming job reading the agents' events and the API, all on this machine.\n"
        f"  status page   {base}/\n"
        f"  API           {base}/docs   metrics {base}/metrics   broker writes {base}/v1/observed\n"
        f"  files         {workdir}/ ({'' if attached else 'lab/, '}job.log, api.log), store {store}\n"
        f"The story (replica.lag.time.max.ms = {lag_ms / 1000:g} s; KAFKA lines are the cluster's truth, "
        f"{'ZooKeeper' if mode == ZOOKEEPER else 'the admin API'}, SHRINK/EXPAND/BATCH isrwatch's view):",
        flush=True,
    )
    for line in story.plan(lag_ms, session_ms, mode):
        print(f"  {line}", flush=True)
    print(
        "Press Ctrl-C to stop." + (" The lab keeps running (`isrwatch lab down` stops it)." if attached else ""),
        flush=True,
    )

    stop = threading.Event()
    _stop_on_signals(stop)
    children: list[Child] = []
    teller: threading.Thread | None = None
    summary = Summary(Api(base), int(time.time() * 1000), say, metadata=mode != ZOOKEEPER)  # from now on
    code = 0
    try:
        if attached:
            lab = load(lab_dir)
        else:
            say("starting the lab (30-60 s; Kafka's jars come from Maven Central on first use)...")
            spec = LabSpec(lag_ms=lag_ms, rate=REAL_RATE, agent=str(default_agent()), kafka=release)
            lab = up(lab_dir, spec, lambda message: say(f"lab: {message}"))
        source = [*lab.stream_options(), "--max-per-batch", str(REAL_MAX_PER_BATCH)]
        _start_job_and_api(workdir, store, args.port, source, children)
        say("the streaming job is starting Spark (20-30 s); the story begins at its first micro-batch")
        teller = threading.Thread(
            target=story.Story(lab_dir, lag_ms, say, stop, (summary.first_batch, summary.caught_up)).run,
            name="story",
            daemon=True,
        )
        teller.start()
        code = _watch(children, summary, say, stop, None if args.duration is None else started + args.duration)
    except KeyboardInterrupt:
        pass
    except LabError as exc:
        say(f"error: {exc}")
        code = 2
    finally:
        stop.set()
        say(f"stopping: the story, streaming job, API{', lab' if not attached else ''}...")
        if teller is not None:
            teller.join(timeout=30)
        for child in children:
            child.stop()
        # The lab this demo started (lab.json's start time is past the demo's), even if Ctrl-C came as `up` returned.
        if not attached and (lab_dir / LAB_JSON).exists() and load(lab_dir).started_ms >= summary.start:
            down(lab_dir, lambda message: say(f"lab: {message}"))
    c = summary.counts
    summary.finish()
    say(
        f"stopped. {summary.outcome(mode != ZOOKEEPER)}, {c['batches']} ISR-change batches, "
        f"{c['divergences']} divergences from the brokers. The store stays in "
        f"{store} (`{_browse_again(store)}`), the lab's logs in {lab_dir}" + (" (still running)." if attached else ".")
    )
    return code


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="see it work: a simulated cluster's fault story, the streaming job and the API, live",
        description="Starts the simulator playing a scripted fault story in real time, the streaming job on the "
        "embedded default (file source, SQLite store, local Spark) and the API with its status "
        "page; prints the URLs and a live summary. Ctrl-C stops everything. With --isr-protocol alter_partition, "
        "the leaders propose their ISR changes with AlterPartition and the story is a stuck controller channel "
        "(STUCK and COMMIT lines; the status page's AlterPartition section). With --real, the story is "
        "played on real Kafka brokers (`isrwatch lab`) that run isrwatch-agent.",
    )
    p.set_defaults(func=main)
    p.add_argument("--port", type=int, default=8000, help="the API's port on 127.0.0.1 (default 8000)")
    p.add_argument(
        "--duration", type=float, metavar="SECONDS", help="stop by itself after this long (default: run until Ctrl-C)"
    )
    p.add_argument(
        "--speed", type=float, default=1.0, help="play the story this many times faster than real time (default 1)"
    )
    p.add_argument("--seed", type=int, default=0, help="the simulator's seed (default 0)")
    p.add_argument(
        "--isr-protocol",
        choices=ISR_PROTOCOLS,
        help="how the simulated leaders write their ISR: zookeeper (the default: a stall, a slow broker, a crash, "
        "an election and a failover, with ISR-change batches) or alter_partition (Kafka 3.9 leaders propose to the "
        "controller, KIP-497; the stuck-queue story: the controller holds broker 1's answers while brokers 2 and 3 "
        "stall, so its request stays in flight, its partitions stay pending and its later proposals queue, until "
        "the answers arrive and commit). Not with --real, whose brokers' way comes from --kafka",
    )
    p.add_argument("--dir", default="var/demo", help="working directory, emptied at start (default var/demo)")
    add_store_argument(p, "the store the demo's job writes, emptied at start if an earlier demo wrote it")
    p.add_argument(
        "--real",
        action="store_true",
        help="the story on real Kafka brokers (KRaft 4.x unless --kafka 3.9) instead of the simulator: "
        "`isrwatch lab up --agent` in DIR/lab "
        "(Java 17, Maven on first use, `make agent`), the streaming job reading the agents' events topic with "
        "--profile agent; real faults (a stall, a restart, a preferred election). Ctrl-C or --duration (counted "
        "from the start, the lab's 30-60 s included) stops everything, the lab too",
    )
    p.add_argument(
        "--lag-ms",
        type=int,
        help=f"--real: the brokers' replica.lag.time.max.ms (500..6000, default {DEFAULT_LAG_MS}; with --lab-dir "
        "the lab's own)",
    )
    add_kafka_option(p, None, "--real: the Kafka release the lab runs (default 4.4, the newest)")
    p.add_argument(
        "--lab-dir",
        metavar="DIR",
        help="--real: play the story on the lab already running in DIR (`isrwatch lab up --agent --dir DIR`) "
        "instead of starting one in DIR/lab; its faults are real (broker 2 stalled, broker 3 restarted, an "
        "election), the streaming job reads its events topic from the start, and the lab keeps running after "
        "the demo stops",
    )
