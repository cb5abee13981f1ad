"""`isrwatch bench agent`: the broker agent on real Kafka 3.9.2 brokers (ZooKeeper, IBP 2.6) on loopback.

  record    the live verification run: light load, a broker stalled (SIGSTOP) past the lag, a broker killed
            (SIGKILL) and restarted, a preferred election; keeps each broker's coalesced and raw event streams
            and the matching Kafka log lines (tests/agent/data/ holds one such recording).
  overhead  produce latency and broker CPU with and without the agent (kafka-tools ProducerPerformance): two
            clusters side by side, the same load on both at once; and the events/s each broker's agent emits.
  volume    events/s per broker with and without coalescing (one run records both streams), idle and under load.
  compare   replays a recording's coalesced and raw streams with isrwatch's model and compares the outputs.
  hookcost  the capture path's cost per fetch on a Kafka thread (no broker: agent/target classes only).

Needs Java 17, Maven (jars are fetched into .tools/), and `make agent` (agent/target/isrwatch-agent.jar).
Prints numbers; asserts nothing.
"""

from __future__ import annotations

import argparse
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
from pathlib import Path

from bench.kafka_lab import AGENT_JAR, Lab, log, provision_jars

LOG_LINE = re.compile(
    r"Shrinking ISR from|ISR updated to|starts at leader epoch|Leader \S+ with topic id|"
    r"Skipped the become-leader|cannot become follower|isrwatch-agent:"
)


def _agent_args(lab_dir: Path, brokers: int, raw: bool = True) -> dict[int, str]:
    """Each broker's -javaagent options: its JSONL file (and the raw stream) in its own directory."""
    args = {}
    for i in range(1, brokers + 1):
        a = f"file={lab_dir}/broker{i}/events.jsonl,cluster=lab,stats.interval.ms=10000"
        if raw:
            a += f",raw.file={lab_dir}/broker{i}/raw.jsonl"
        args[i] = a
    return args


def _admin(lab: Lab):
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=lab.bootstrap, request_timeout_ms=610_000)


def _create_topic(lab: Lab, name: str, partitions: int, rf: int) -> None:
    """Creates the topic and waits until every partition has a leader (minutes for 10,000 partitions)."""
    from kafka.admin import NewTopic

    admin = _admin(lab)
    try:
        admin.create_topics([NewTopic(name, partitions, rf)], timeout_ms=600_000)
        deadline = time.time() + 900
        while time.time() < deadline:
            described = admin.describe_topics([name])[0]["partitions"]
            led = sum(1 for p in described if p["leader_id"] >= 0)
            if led == partitions:
                return
            log(f"{led}/{partitions} partitions of {name} have a leader")
            time.sleep(10)
        raise RuntimeError(f"{name}: not every partition got a leader")
    finally:
        admin.close()


class _Load(threading.Thread):
    """A kafka-python producer sending `rate` small records per second round-robin over the topics' partitions."""

    def __init__(self, lab: Lab, topics: dict[str, int], rate: float):
        super().__init__(daemon=True)
        from kafka import KafkaProducer

        self.producer = KafkaProducer(
            bootstrap_servers=lab.bootstrap, acks=1, linger_ms=5, retries=10, request_timeout_ms=20000
        )
        self.targets = [(t, p) for t, n in topics.items() for p in range(n)]
        self.rate = rate
        self.stop = threading.Event()
        self.sent = 0

    def run(self) -> None:
        while not self.stop.wait(1 / self.rate):
            topic, partition = self.targets[self.sent % len(self.targets)]
            try:
                self.producer.send(topic, b"x" * 64, partition=partition)
                self.sent += 1
            except Exception as exc:  # noqa: BLE001 - keep the load going through broker faults
                log(f"produce: {exc}")

    def close(self) -> None:
        self.stop.set()
        self.join()
        self.producer.close(timeout=10)


def cmd_record(args: argparse.Namespace) -> int:
    """The live verification scenario; copies the recordings and Kafka's log lines to --out."""
    from kafka.admin import NewTopic

    provision_jars()
    work = Path(tempfile.mkdtemp(prefix="isrwatch-agent-record-"))
    out = Path(args.out)
    lag = 6000
    try:
        with Lab(work, brokers=3, lag_ms=lag, agent_args=_agent_args(work, 3)) as lab:
            b1, b2, b3 = lab.nodes
            log(f"brokers up at {lab.bootstrap}; topics orders (3 partitions, RF 3), payments (replicas 2,1)")
            _create_topic(lab, "orders", 3, 3)
            admin = _admin(lab)
            admin.create_topics([NewTopic("payments", -1, -1, replica_assignments={0: [2, 1]})], timeout_ms=60000)
            load = _Load(lab, {"orders": 3, "payments": 1}, args.rate)
            load.start()
            time.sleep(10)
            log(
                "SIGSTOP broker 3 for 12 s: the leaders it follows shrink it as stuck (lag 6 s), its own leader "
                "shrinks its followers when it resumes"
            )
            b3.proc.send_signal(signal.SIGSTOP)
            time.sleep(12)
            b3.proc.send_signal(signal.SIGCONT)
            log("SIGCONT broker 3: it catches up and is added back")
            time.sleep(15)
            log("SIGSTOP broker 1 for 9 s (shrunk out of payments), then SIGKILL broker 2 (payments' only ISR member)")
            b1.proc.send_signal(signal.SIGSTOP)
            time.sleep(9)
            b2.proc.send_signal(signal.SIGKILL)
            b2.proc.wait()
            b1.proc.send_signal(signal.SIGCONT)
            log("broker 2's ZooKeeper session expires after 18 s: payments goes offline (leader -1 sent to broker 1)")
            time.sleep(24)
            lab.start(b2)
            lab.wait_started(b2)
            log("broker 2 restarted; waiting for it to lead payments again and rejoin the ISRs")
            time.sleep(20)
            log("preferred leader election on every partition")
            admin.elect_leaders(0, None, raise_errors=False)
            admin.close()
            time.sleep(8)
            load.close()
            log(f"load sent {load.sent} records; stopping the brokers")
        out.mkdir(parents=True, exist_ok=True)
        for i in (1, 2, 3):
            d = work / f"broker{i}"
            shutil.copy(d / "events.jsonl", out / f"broker{i}.events.jsonl")
            shutil.copy(d / "raw.jsonl", out / f"broker{i}.raw.jsonl")
            lines = []
            for name in ("server.log", "state-change.log", "stdout.log"):
                for line in (d / name).read_text(errors="replace").splitlines():
                    if LOG_LINE.search(line) and "TRACE" not in line:
                        lines.append(f"{name}: {line}")
            (out / f"broker{i}.kafka-log.txt").write_text("\n".join(lines) + "\n")
        _summary(out)
        _compare(out, lag)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            log(f"kept {work}")
    return 0


def _compare(directory: Path, lag_ms: int) -> bool:
    """Replays the coalesced and the raw streams of a recording (all brokers together); True when equal."""
    from state.config import Config
    from state.replay import replay

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
        a, b = getattr(results["events"], what), getattr(results["raw"], what)
        equal = a == b
        same &= equal
        print(f"{what}: {len(a)} coalesced vs {len(b)} raw: {'identical' if equal else 'DIFFERENT'}")
    lines = {k: r.summary["lines"] for k, r in results.items()}
    print(
        f"lines: {lines['events']} coalesced vs {lines['raw']} raw ({lines['events'] / lines['raw']:.0%}); "
        f"decisions by kind {results['raw'].summary['decisions_by_kind']}"
    )
    return same


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
    for b in lab.nodes:
        main = sum(_count_events(b.events, start_ms, end_ms).values()) / seconds
        rawr = sum(_count_events(b.raw_events, start_ms, end_ms).values()) / seconds if raw else None
        out.append((main, rawr))
    return out


def _perf(lab: Lab, topic: str, records: int, throughput: int) -> tuple[dict, float, list[float]]:
    """Runs ProducerPerformance; returns its figures, the wall time and each broker's CPU seconds used."""
    cpu0 = [b.cpu_seconds() for b in lab.nodes]
    t0 = time.time()
    text = lab.java_tool(
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
            f"bootstrap.servers={lab.bootstrap}",
            "acks=all",
            "linger.ms=5",
        ]
    )
    wall = time.time() - t0
    cpu = [b.cpu_seconds() - c for b, c in zip(lab.nodes, cpu0, strict=True)]
    last = [line for line in text.splitlines() if "records sent" in line][-1]
    m = re.search(
        r"([\d.]+) records/sec.*?([\d.]+) ms avg latency, ([\d.]+) ms max latency, (\d+) ms 50th, "
        r"(\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th",
        last,
    )
    figures = dict(
        zip(
            ("records_per_s", "avg_ms", "max_ms", "p50_ms", "p95_ms", "p99_ms", "p999_ms"),
            map(float, m.groups()),
            strict=True,
        )
    )
    return figures, wall, cpu


def _start_lab(args: argparse.Namespace, work: Path, agent: dict[int, str]) -> Lab:
    lab = Lab(
        work,
        brokers=3,
        lag_ms=args.lag,
        agent_args=agent,
        heap=args.heap,
        extra_config={"num.partitions": "1", "controller.socket.timeout.ms": "120000"},
    )
    lab.__enter__()
    try:
        log(f"brokers up (agent: {'yes' if agent else 'no'}); creating {args.partitions} partitions, RF 3")
        _create_topic(lab, "perf", args.partitions, 3)
        time.sleep(args.settle)
    except BaseException:
        lab.__exit__(None, None, None)
        raise
    return lab


def cmd_overhead(args: argparse.Namespace) -> int:
    """Two clusters side by side, one with the agent: the same load on both at once, so the machine's other work
    slows both alike. Broker CPU and produce latency per cluster, --rounds times."""
    provision_jars()
    works = {flag: Path(tempfile.mkdtemp(prefix=f"isrwatch-agent-overhead-{flag}-")) for flag in ("without", "with")}
    labs: dict[str, Lab] = {}
    try:
        for flag, work in works.items():
            labs[flag] = _start_lab(args, work, _agent_args(work, 3, raw=False) if flag == "with" else {})
        rows = []
        for rnd in range(1, args.rounds + 1):
            idle = {f: _Cpu(lab) for f, lab in labs.items()}
            time.sleep(args.idle)
            idle_cpu = {f: c.per_broker_pct() for f, c in idle.items()}
            results: dict[str, tuple] = {}

            def load(flag: str, lab: Lab, into: dict = results) -> None:
                into[flag] = _perf(lab, "perf", args.records, args.throughput)

            t0 = int(time.time() * 1000)
            threads = [threading.Thread(target=load, args=(f, lab)) for f, lab in labs.items()]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
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
                f"idle {[r['broker_cpu_idle_pct'] for r in sel]} %"
            )
    finally:
        for lab in labs.values():
            lab.__exit__(None, None, None)
        for work in works.values():
            shutil.rmtree(work, ignore_errors=True)
    return 0


class _Cpu:
    """CPU used by each broker of a lab from now on."""

    def __init__(self, lab: Lab):
        self.lab = lab
        self.t0 = time.time()
        self.cpu0 = [b.cpu_seconds() for b in lab.nodes]

    def per_broker_pct(self) -> list[float]:
        wall = time.time() - self.t0
        return [100 * (b.cpu_seconds() - c) / wall for b, c in zip(self.lab.nodes, self.cpu0, strict=True)]


def cmd_volume(args: argparse.Namespace) -> int:
    """Events/s per broker, coalesced (main) and uncoalesced (raw) streams of the same run, idle and loaded."""
    provision_jars()
    work = Path(tempfile.mkdtemp(prefix="isrwatch-agent-volume-"))
    lab = _start_lab(args, work, _agent_args(work, 3, raw=True))
    try:
        i0 = int(time.time() * 1000)
        time.sleep(args.idle)
        idle = _rates(lab, i0, int(time.time() * 1000), raw=True)
        t0 = int(time.time() * 1000)
        figures, _, _ = _perf(lab, "perf", args.records, args.throughput)
        loaded = _rates(lab, t0, int(time.time() * 1000), raw=True)
    finally:
        lab.__exit__(None, None, None)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
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
            f"raw {[round(r, 1) for _, r in rates]}"
        )
    return 0


def cmd_hookcost(args: argparse.Namespace) -> int:
    """Runs RecorderBench (agent test classes): ns per captured fetch through lock, coalescer and queue."""
    agent = AGENT_JAR.parent
    cp = f"{agent / 'classes'}:{agent / 'test-classes'}"
    if not (agent / "test-classes" / "io" / "isrwatch" / "agent" / "RecorderBench.class").exists():
        sys.exit(f"isrwatch bench agent: {agent}/test-classes is missing: run `make agent` first")
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
    rec = sub.add_parser("record", help="the live verification run; writes recordings and Kafka log lines")
    rec.add_argument("--out", required=True, help="directory for brokerN.events.jsonl, brokerN.raw.jsonl, logs")
    rec.add_argument("--rate", type=float, default=2.0, help="records/s of the light load (default 2)")
    rec.add_argument("--keep", action="store_true", help="keep the brokers' work directory")
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
        p.add_argument("--settle", type=float, default=20, help="seconds after creating the topic (20)")
        p.add_argument("--heap", default="1g", help="broker heap (1g)")
        p.add_argument("--rounds", type=int, default=3, help="overhead: rounds of load on both clusters (3)")
        p.add_argument("--keep", action="store_true", help="volume: keep the work directory")
        p.set_defaults(func=func)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if not AGENT_JAR.exists():
        parser.error(f"{AGENT_JAR} is missing: run `make agent` first")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the brokers on the way out
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
