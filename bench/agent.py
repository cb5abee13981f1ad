"""`isrwatch bench agent`: the broker agent on the lab's real Kafka 3.9.2 brokers (`isrwatch lab`: ZooKeeper mode,
IBP 2.6, loopback), each broker's agent writing its events to a file in the broker's kafka_logs_dir.

  record    the live verification run: light load, a broker stalled (SIGSTOP) past the lag, a broker killed
            (SIGKILL) and restarted, a preferred election; keeps each broker's coalesced and raw event streams
            and the matching Kafka log lines (tests/agent/data/ holds one such recording).
  overhead  produce latency and broker CPU with and without the agent (kafka-tools ProducerPerformance): two
            labs side by side, the same load on both at once; and the events/s each broker's agent emits.
  volume    events/s per broker with and without coalescing (one run records both streams), idle and under load.
  compare   replays a recording's coalesced and raw streams with isrwatch's model and compares the outputs.
  hookcost  the capture path's cost per fetch on a Kafka thread (no broker: agent/target classes only).

Needs Java 17, Maven (the lab's jars are fetched once into .tools/jars/kafka) and `make agent`
(agent/target/isrwatch-agent.jar). Every lab runs in a temporary directory and is stopped on the way out
(Ctrl-C too). Prints numbers; asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from isrwatch.lab import faults
from isrwatch.lab.cluster import down, start_producer, up
from isrwatch.lab.config import LabSpec, Topic, run_tool
from isrwatch.lab.jars import ZOOKEEPER_RELEASE, default_agent
from isrwatch.lab.record import CHROOT, Broker, Lab, LabError, editing, load
from isrwatch.lab.truth import partition_states, registered_brokers, wait_until, zookeeper
from isrwatch.processes.detached import alive
from isrwatch.processes.proc import cpu_seconds

LOG_LINE = re.compile(
    r"Shrinking ISR from|ISR updated to|starts at leader epoch|Leader \S+ with topic id|"
    r"Skipped the become-leader|cannot become follower|isrwatch-agent:"
)
EVENTS, RAW = "agent.events.jsonl", "agent.raw.jsonl"  # in each broker's kafka_logs_dir
GRACEFUL_S = 30.0  # brokers stop with SIGTERM (controlled shutdown; the agents flush their files), as Kafka does


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _agent_options(raw: bool) -> tuple[tuple[str, str], ...]:
    """The agent writes to a file in each broker's logs (and the uncoalesced stream next to it with `raw`)."""
    options = (("file", f"{{logs}}/{EVENTS}"), ("stats.interval.ms", "10000"))
    return options + ((("raw.file", f"{{logs}}/{RAW}"),) if raw else ())


def _events(broker: Broker, raw: bool = False) -> Path:
    return Path(broker.kafka_logs_dir) / (RAW if raw else EVENTS)


@contextlib.contextmanager
def _workdir(name: str, keep: bool = False) -> Iterator[Path]:
    """A temporary directory for a lab, removed at the end unless `keep`."""
    work = Path(tempfile.mkdtemp(prefix=f"isrwatch-agent-{name}-"))
    try:
        yield work
    finally:
        if keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


@contextlib.contextmanager
def _lab(work: Path, spec: LabSpec) -> Iterator[Lab]:
    """A lab in `work` for the block, stopped gracefully at the end (its agents flush their files); a failed start
    leaves nothing running."""
    lab = up(work, spec, log)
    try:
        yield lab
    finally:
        down(work, log, GRACEFUL_S)


def _admin(lab: Lab):
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=lab.bootstrap_servers, request_timeout_ms=60_000)


def _led(lab: Lab, topics: list[str], timeout: float) -> None:
    """Wait until every partition of the topics has a leader (ZooKeeper's partition states)."""
    with zookeeper(lab.zookeeper) as zk:
        wait_until(
            f"leaders for {', '.join(topics)}",
            lambda: bool(s := partition_states(zk, topics)) and all(p.leader >= 0 for p in s.values()),
            timeout,
            interval=1,
        )


def cmd_record(args: argparse.Namespace) -> int:
    """The live verification scenario; copies the recordings and Kafka's log lines to --out."""
    from kafka.admin import NewTopic

    lag = 6000
    spec = LabSpec(
        brokers=3,
        lag_ms=lag,
        topics=(Topic("orders", 3),),
        rate=0,
        agent=str(default_agent()),
        agent_options=_agent_options(raw=True),
        kafka=ZOOKEEPER_RELEASE,  # the recordings are of 3.9.2 brokers (ZooKeeper mode)
    )
    with _workdir("record", args.keep) as work:
        with _lab(work, spec) as lab:
            log("lab up; topics orders (3 partitions, RF 3), payments (replicas 2,1)")
            admin = _admin(lab)
            try:
                admin.create_topics([NewTopic("payments", -1, -1, replica_assignments={0: [2, 1]})], timeout_ms=60000)
            finally:
                admin.close()
            _led(lab, ["payments"], 60)
            with editing(work) as lab:
                lab.topics["payments"] = 1
                start_producer(lab, args.rate)
            time.sleep(10)
            log(
                "stall broker 3 for 12 s: the leaders it follows shrink it as stuck (lag 6 s), its own leader "
                "shrinks its followers when it resumes"
            )
            log(faults.stall(work, 3, 12))
            time.sleep(12)
            log("broker 3 resumes: it catches up and is added back")
            time.sleep(15)
            log("stall broker 1 for 9 s (shrunk out of payments), then kill broker 2 (payments' only ISR member)")
            log(faults.stall(work, 1, 9))
            time.sleep(9)
            log(faults.kill(work, 2))
            log("broker 2's ZooKeeper session expires after 18 s: payments goes offline (leader -1 sent to broker 1)")
            time.sleep(24)
            log(faults.restart(work, 2))
            with zookeeper(lab.zookeeper) as zk:
                wait_until(
                    "broker 2 running and registered again",
                    lambda: alive(load(work).broker(2)) and 2 in registered_brokers(zk, CHROOT),
                    60,
                )
            log("broker 2 restarted; waiting for it to lead payments again and rejoin the ISRs")
            time.sleep(20)
            log(faults.elect(work))
            time.sleep(8)
            log("stopping the lab (controlled shutdown)")
        return _copy_recording(load(work).brokers, Path(args.out), lag)


def _copy_recording(brokers: list[Broker], out: Path, lag_ms: int) -> int:
    """brokerN.events.jsonl, brokerN.raw.jsonl and brokerN.kafka-log.txt in `out`; then the streams' summary."""
    out.mkdir(parents=True, exist_ok=True)
    for b in brokers:
        shutil.copy(_events(b), out / f"broker{b.id}.events.jsonl")
        shutil.copy(_events(b, raw=True), out / f"broker{b.id}.raw.jsonl")
        lines = []
        for name in ("server.log", "state-change.log", "stdout.log"):
            for line in (Path(b.kafka_logs_dir) / name).read_text(errors="replace").splitlines():
                if LOG_LINE.search(line) and "TRACE" not in line:
                    lines.append(f"{name}: {line}")
        (out / f"broker{b.id}.kafka-log.txt").write_text("\n".join(lines) + "\n")
    _summary(out)
    return 0 if _compare(out, lag_ms) else 1


def _compare(directory: Path, lag_ms: int) -> bool:
    """Replays the coalesced and the raw streams of a recording (all brokers together); True when equal."""
    from isrwatch.state.config import Config
    from isrwatch.state.replay import replay

    config = Config(replica_lag_time_max_ms=lag_ms, isr_expiration_interval_ms=0, isr_change_check_interval_ms=0)
    for f in sorted(directory.glob("broker*.jsonl")):
        seqs = [json.loads(line)["seq"] for line in f.read_text().splitlines()]
        increasing = all(b > a for a, b in zip(seqs, seqs[1:], strict=False))
        lives = 1 + sum(1 for a, b in zip(seqs, seqs[1:], strict=False) if b - a > 1_000_000)
        gaps = sum(1 for a, b in zip(seqs, seqs[1:], strict=False) if 1 < b - a <= 1_000_000)
        print(
            f"{f.name}: seq {'strictly increasing' if increasing else 'NOT increasing'}, {lives} agent run(s), "
            f"{gaps} gaps (dropped events)"
        )
    results = {}
    for kind in ("events", "raw"):
        files = sorted(directory.glob(f"broker*.{kind}.jsonl"))
        results[kind] = replay([f.read_text().splitlines() for f in files], config)
    same = True
    for what in ("decisions", "propagations", "records", "divergences"):
        a, b = (_comparable(getattr(results[k], what)) for k in ("events", "raw"))
        equal = a == b
        same &= equal
        note = " (apart from the observed events' seq)" if what == "divergences" else ""
        print(f"{what}: {len(a)} coalesced vs {len(b)} raw: {'identical' if equal else 'DIFFERENT'}{note}")
    lines = {k: r.summary["lines"] for k, r in results.items()}
    print(
        f"lines: {lines['events']} coalesced vs {lines['raw']} raw ({lines['events'] / lines['raw']:.0%}); "
        f"decisions by kind {results['raw'].summary['decisions_by_kind']}"
    )
    return same


def _comparable(items: list) -> list:
    """The items as plain data, without the `seq` of a divergence's observed event: the coalesced stream numbers
    fewer events, so the same broker event has another seq in each stream."""
    import msgspec

    plain = msgspec.to_builtins(items)
    for item in plain:
        if isinstance(item, dict) and isinstance(item.get("observed"), dict):
            item["observed"].pop("seq", None)
    return plain


def cmd_compare(args: argparse.Namespace) -> int:
    return 0 if _compare(Path(args.dir), args.lag) else 1


def _count_events(path: Path, start_ms: int, end_ms: int) -> Counter:
    """Events by type whose ts lies in [start_ms, end_ms)."""
    counts: Counter = Counter()
    if not path.exists():
        return counts
    with open(path) as f:
        for line in f:
            e = json.loads(line)
            if start_ms <= e["ts"] < end_ms:
                counts[e["type"]] += 1
    return counts


def _rates(lab: Lab, start_ms: int, end_ms: int, raw: bool) -> list[tuple[float, float | None]]:
    """Per broker: events/s of the main stream (and of the raw stream) in the window."""
    seconds = (end_ms - start_ms) / 1000
    out = []
    for b in lab.brokers:
        main = sum(_count_events(_events(b), start_ms, end_ms).values()) / seconds
        rawr = sum(_count_events(_events(b, raw=True), start_ms, end_ms).values()) / seconds if raw else None
        out.append((main, rawr))
    return out


class _Cpu:
    """CPU used by each broker of a lab from now on."""

    def __init__(self, lab: Lab):
        self.lab = lab
        self.t0 = time.time()
        self.cpu0 = [cpu_seconds(b.pid)[1] for b in lab.brokers]

    def seconds(self) -> list[float]:
        return [cpu_seconds(b.pid)[1] - c for b, c in zip(self.lab.brokers, self.cpu0, strict=True)]

    def per_broker_pct(self) -> list[float]:
        wall = time.time() - self.t0
        return [100 * used / wall for used in self.seconds()]


PERF = re.compile(
    r"([\d.]+) records/sec.*?([\d.]+) ms avg latency, ([\d.]+) ms max latency, (\d+) ms 50th, "
    r"(\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th"
)


def _perf(lab: Lab, topic: str, records: int, throughput: int) -> tuple[dict, float, list[float]]:
    """Runs ProducerPerformance (kafka-tools); returns its figures, the wall time and each broker's CPU seconds."""
    cpu = _Cpu(lab)
    t0 = time.time()
    text = run_tool(
        [
            "org.apache.kafka.tools.ProducerPerformance",
            "--topic",
            topic,
            "--num-records",
            str(records),
            "--record-size",
            "100",
            "--throughput",
            str(throughput),
            "--producer-props",
            f"bootstrap.servers={lab.bootstrap_servers}",
            "acks=all",
            "linger.ms=5",
        ],
        log,
    )
    wall = time.time() - t0
    used = cpu.seconds()
    last = [line for line in text.splitlines() if "records sent" in line][-1]
    m = PERF.search(last)
    if m is None:
        raise LabError(f"ProducerPerformance: no figures in its last line {last!r}")
    names = ("records_per_s", "avg_ms", "max_ms", "p50_ms", "p95_ms", "p99_ms", "p999_ms")
    return dict(zip(names, map(float, m.groups()), strict=True)), wall, used


def _load_spec(args: argparse.Namespace, agent: bool, raw: bool) -> LabSpec:
    """One lab of `overhead`/`volume`: the test topic, no steady producer (ProducerPerformance is the load), and
    Kafka's default replica.fetch.max.bytes (the lab's small one holds back followers on purpose)."""
    return LabSpec(
        brokers=3,
        lag_ms=args.lag,
        topics=(Topic("perf", args.partitions),),
        rate=0,
        agent=str(default_agent()) if agent else None,
        agent_options=_agent_options(raw) if agent else (),
        start_timeout_s=900,
        broker_heap=args.heap,
        broker_config=(
            ("num.partitions", "1"),
            ("controller.socket.timeout.ms", "120000"),
            ("replica.fetch.max.bytes", "1048576"),
        ),
        kafka=ZOOKEEPER_RELEASE,  # measured on 3.9.2 brokers (ZooKeeper mode)
    )


def cmd_overhead(args: argparse.Namespace) -> int:
    """Two labs side by side, one with the agent: the same load on both at once, so the machine's other work
    slows both alike. Broker CPU and produce latency per lab, --rounds times."""
    with contextlib.ExitStack() as stack:
        labs: dict[str, Lab] = {}
        for flag in ("without", "with"):
            work = stack.enter_context(_workdir(f"overhead-{flag}"))
            log(f"lab {flag} the agent: {args.partitions} partitions, RF 3")
            labs[flag] = stack.enter_context(_lab(work, _load_spec(args, agent=flag == "with", raw=False)))
        time.sleep(args.settle)
        rows = []
        for rnd in range(1, args.rounds + 1):
            idle = {f: _Cpu(lab) for f, lab in labs.items()}
            log(f"round {rnd}: {args.idle:g} s idle, then {args.records} records at {args.throughput}/s on both")
            time.sleep(args.idle)
            idle_cpu = {f: c.per_broker_pct() for f, c in idle.items()}
            results: dict[str, tuple] = {}
            errors: list[BaseException] = []

            def load_one(flag: str, lab: Lab, into: dict = results, failed: list = errors) -> None:
                try:
                    into[flag] = _perf(lab, "perf", args.records, args.throughput)
                except BaseException as exc:  # noqa: BLE001 - raised again in the main thread
                    failed.append(exc)

            t0 = int(time.time() * 1000)
            threads = [threading.Thread(target=load_one, args=(f, lab)) for f, lab in labs.items()]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errors:
                raise errors[0]
            t1 = int(time.time() * 1000)
            for f in ("without", "with"):
                figures, wall, cpu = results[f]
                row = {
                    "round": rnd,
                    "agent": f == "with",
                    **figures,
                    "broker_cpu_load_pct": round(100 * sum(cpu) / wall / len(cpu), 1),
                    "broker_cpu_ms_per_1000_records": round(1000 * sum(cpu) / len(cpu) / args.records * 1000, 2),
                    "broker_cpu_idle_pct": round(sum(idle_cpu[f]) / len(idle_cpu[f]), 1),
                }
                if f == "with":
                    row["events_per_s_load"] = [round(m, 1) for m, _ in _rates(labs[f], t0, t1, raw=False)]
                    row["events_per_s_idle"] = [
                        round(m, 1) for m, _ in _rates(labs[f], t0 - int(args.idle * 1000), t0, raw=False)
                    ]
                rows.append(row)
                print(json.dumps(row), flush=True)
        for flag in (False, True):
            sel = [r for r in rows if r["agent"] == flag]
            print(
                f"agent={flag}: p99 {[r['p99_ms'] for r in sel]} ms, p50 {[r['p50_ms'] for r in sel]} ms, "
                f"broker CPU under load {[r['broker_cpu_load_pct'] for r in sel]} % of a core per broker "
                f"({[r['broker_cpu_ms_per_1000_records'] for r in sel]} ms per 1000 records), "
                f"idle {[r['broker_cpu_idle_pct'] for r in sel]} %",
                flush=True,
            )
    return 0


def cmd_volume(args: argparse.Namespace) -> int:
    """Events/s per broker, coalesced (main) and uncoalesced (raw) streams of the same run, idle and loaded."""
    with _workdir("volume", args.keep) as work, _lab(work, _load_spec(args, agent=True, raw=True)) as lab:
        log(f"lab up with the agent (coalesced and raw streams): {args.partitions} partitions, RF 3")
        time.sleep(args.settle)
        i0 = int(time.time() * 1000)
        log(f"{args.idle:g} s idle, then {args.records} records at {args.throughput}/s")
        time.sleep(args.idle)
        idle = _rates(lab, i0, int(time.time() * 1000), raw=True)
        t0 = int(time.time() * 1000)
        figures, _, _ = _perf(lab, "perf", args.records, args.throughput)
        loaded = _rates(lab, t0, int(time.time() * 1000), raw=True)
    followers = 2 * args.partitions / 3
    interval = args.lag / 2 / 1000
    print(
        f"partitions={args.partitions} RF 3, replica.lag.time.max.ms={args.lag}: each broker leads "
        f"~{args.partitions // 3} partitions, ~{followers:.0f} follower replicas; bound followers/interval = "
        f"{followers / interval:.0f}/s"
    )
    for name, rates in (("idle", idle), (f"load {figures['records_per_s']:.0f} rec/s", loaded)):
        print(
            f"{name}: coalesced {[round(m, 1) for m, _ in rates]} events/s per broker, "
            f"raw {[round(r, 1) for _, r in rates]}",
            flush=True,
        )
    return 0


def cmd_hookcost(args: argparse.Namespace) -> int:
    """Runs RecorderBench (agent test classes): ns per captured fetch through lock, coalescer and queue."""
    target = default_agent().parent
    cp = f"{target / 'classes'}:{target / 'test-classes'}"
    if not (target / "test-classes" / "io" / "isrwatch" / "agent" / "RecorderBench.class").exists():
        sys.exit(f"isrwatch bench agent: {target}/test-classes is missing: run `make agent` first")
    return subprocess.run(
        ["java", "-Xmx512m", "-cp", cp, "io.isrwatch.agent.RecorderBench", str(args.events)], check=False
    ).returncode


def _summary(out: Path) -> None:
    for f in sorted(out.glob("broker*.jsonl")):
        counts = Counter(json.loads(line)["type"] for line in f.read_text().splitlines())
        print(
            f"{f.name}: {sum(counts.values())} events, {f.stat().st_size // 1024} KiB, {dict(sorted(counts.items()))}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="isrwatch bench agent", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record", help="the live verification run (about 2.5 min); writes recordings and log lines")
    rec.add_argument("--out", required=True, help="directory for brokerN.events.jsonl, brokerN.raw.jsonl, logs")
    rec.add_argument("--rate", type=int, default=2, help="records/s of the light load (default 2)")
    rec.add_argument("--keep", action="store_true", help="keep the lab's directory (configs, data, logs)")
    rec.set_defaults(func=cmd_record)
    cmp_ = sub.add_parser("compare", help="replay a recording's coalesced and raw streams and compare the outputs")
    cmp_.add_argument("dir", help="a directory written by `record`")
    cmp_.add_argument("--lag", type=int, default=6000, help="replica.lag.time.max.ms of the run (default 6000)")
    cmp_.set_defaults(func=cmd_compare)
    hc = sub.add_parser("hookcost", help="ns per captured fetch on a Kafka thread (no broker)")
    hc.add_argument("--events", type=int, default=2_000_000, help="fetches per thread and case (2,000,000)")
    hc.set_defaults(func=cmd_hookcost)
    for name, func, doc in (
        ("overhead", cmd_overhead, "CPU and produce latency with and without the agent"),
        ("volume", cmd_volume, "events/s with and without coalescing"),
    ):
        p = sub.add_parser(name, help=doc)
        p.add_argument("--partitions", type=int, default=1000, help="partitions of the test topic, RF 3 (1000)")
        p.add_argument("--lag", type=int, default=30000, help="replica.lag.time.max.ms (default 30000)")
        p.add_argument("--records", type=int, default=300_000, help="ProducerPerformance records (300,000)")
        p.add_argument("--throughput", type=int, default=5000, help="ProducerPerformance records/s (5,000)")
        p.add_argument("--idle", type=float, default=60, help="seconds of the idle window (60)")
        p.add_argument("--settle", type=float, default=20, help="seconds after the lab is up (20)")
        p.add_argument("--heap", default="1g", help="broker heap (1g)")
        if name == "overhead":
            p.add_argument("--rounds", type=int, default=3, help="rounds of load on both labs (3)")
        else:
            p.add_argument("--keep", action="store_true", help="keep the lab's directory")
        p.set_defaults(func=func)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.cmd != "compare" and not default_agent().exists():
        parser.error(f"{default_agent()} is missing: run `make agent` first")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the labs on the way out
    try:
        return args.func(args)
    except LabError as exc:
        print(f"isrwatch bench agent: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
