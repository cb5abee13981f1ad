"""The tests' real Kafka labs: started once per session by the same code as `isrwatch lab up`, and helpers
that read the cluster's truth (ISR, leaders, controller) from ZooKeeper or Kafka's admin API, never
from isrwatch (isrwatch.lab.truth's `partitions`, `registrations`, `active_controller`, in either mode).

The session runs two labs, one after the other (never both: they share two cores): the KRaft lab (`kraft_session_spec`,
Kafka 4.4.0, no agent) for the KRaft tests, which run first, and the ZooKeeper lab below, whose fixture stops the
KRaft lab before it starts (`retire_kraft_labs`).

Every monitored broker runs the project's isrwatch-agent (built with Maven when agent/target lacks it), sending
to the monitor broker's `isrwatch.events`. Suites that need other lab settings (another lag) extend
`session_spec()` or override the `lab_spec` fixture in tests/conftest.py; fault tests leave the cluster healthy
(`wait_healthy`).

Faults are slow (a stall 10 s and its recovery, a kill the 18 s ZooKeeper session and a restart), so each runs once
a session: the stall and the kill-restart-election (`run_stall`, `run_restart`, session fixtures in conftest) record
what ZooKeeper showed during them for the lab's tests and when they happened for the agent's; `stream_session`
runs the fault kinds no test ran (`run_missing_faults`), then one `isrwatch run --profile agent` over everything the
agents sent, which the agent's tests and the reality suite read.
"""

from __future__ import annotations

import contextlib
import functools
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from isrwatch.lab import faults, truth
from isrwatch.lab.cluster import down, up
from isrwatch.lab.config import LabSpec, parse_topics
from isrwatch.lab.jars import KAFKA_NEWEST, ZOOKEEPER_RELEASE, default_agent, tools_dir
from isrwatch.lab.record import EVENTS_TOPIC, Lab, LabError, load
from isrwatch.lab.truth import PartitionState, registrations, serving
from isrwatch.processes import proc
from isrwatch.processes.detached import alive
from isrwatch.state.config import Config
from isrwatch.store import open_store

States = dict[tuple[str, int], PartitionState]
# Short, so that faults show within seconds (a stalled follower is out after 5-7.5 s, well within a 10 s stall,
# itself safely inside the 18 s ZooKeeper session); >= replica.fetch.wait.max.ms as Kafka requires.
LAG_MS = 5000
# The agent's counters (written, dropped, failed) in each broker's stdout.log every 10 s, not once a minute.
AGENT_OPTIONS = (("stats.interval.ms", "10000"),)
STALLED = 3  # the session stall's broker
STALL_S = 10
# After the last fault's end: every batch sent (linger 5 s + a run) and, for the stream, the cluster's newest event
# past it by the lateness (5 s) plus the audit window (the lag, 5 s). Counted from that end (`after_last_fault`).
QUIET_S = 15
FENCE_S = 22  # KRaft: past broker.session.timeout.ms (18 s) plus a heartbeat interval (2 s)


@dataclass
class FaultWindow:
    """One fault a test ran on the session lab, from its start to the lab healthy again (epoch ms; 0: not over)."""

    kind: str  # a `isrwatch lab fault` kind: stall, slow, restart, elect, controller-failover
    start_ms: int
    end_ms: int = 0

    def over(self) -> None:
        self.end_ms = int(time.time() * 1000)


# Every fault the session ran, in order, on the ZooKeeper lab and on the KRaft lab: the reality suite (tests/reality)
# holds isrwatch to what the brokers did during all of them, so no fault has to run twice.
FAULT_LOG: list[FaultWindow] = []
KRAFT_FAULT_LOG: list[FaultWindow] = []


def fault_begins(kind: str, log: list[FaultWindow] = FAULT_LOG) -> FaultWindow:
    """Log a fault for the reality suite; call `.over()` once the lab is healthy again."""
    window = FaultWindow(kind, int(time.time() * 1000))
    log.append(window)
    return window


@dataclass
class Record:
    """One record of the agents' events topic."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes


def end_offsets(lab: Lab) -> dict[int, int]:
    """The events topic's end offset now, per partition."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=lab.monitor_bootstrap)
    try:
        tps = [TopicPartition(lab.events_topic, p) for p in consumer.partitions_for_topic(lab.events_topic)]
        return {tp.partition: offset for tp, offset in consumer.end_offsets(tps).items()}
    finally:
        consumer.close()


def every_record(lab: Lab) -> list[Record]:
    """Every record of the events topic from its start to its end now, in each partition's order."""
    from kafka import KafkaConsumer, TopicPartition

    stop = end_offsets(lab)
    consumer = KafkaConsumer(bootstrap_servers=lab.monitor_bootstrap, group_id=None, enable_auto_commit=False)
    tps = [TopicPartition(lab.events_topic, p) for p in stop]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    records = []
    try:
        while any(consumer.position(tp) < stop[tp.partition] for tp in tps):
            for batch in consumer.poll(timeout_ms=1000, max_records=50_000).values():
                records += [
                    Record(r.partition, r.offset, r.key, r.value) for r in batch if r.offset < stop[r.partition]
                ]
    finally:
        consumer.close()
    return records


def progress(message: str) -> None:
    print(f"lab: {message}", file=sys.stderr, flush=True)


def project_agent() -> Path:
    """agent/target/isrwatch-agent.jar, built with Maven if it is missing (`make test` builds it first and runs
    its unit tests; here only the jar is needed)."""
    if not default_agent().is_file():
        progress(f"building {default_agent()} with Maven")
        agent_dir = default_agent().parents[1]
        argv = ["mvn", "-q", "-B", f"-Dmaven.repo.local={tools_dir() / 'm2'}", "-DskipTests", "package"]
        done = subprocess.run(argv, cwd=agent_dir, capture_output=True, text=True)
        if done.returncode != 0 or not default_agent().is_file():
            pytest.fail(f"building the agent failed: {' '.join(argv)}:\n{done.stdout}{done.stderr}", pytrace=False)
    return default_agent()


def session_spec(agent: Path | None) -> LabSpec:
    """The session lab: Kafka 3.9 (ZooKeeper mode), 3 brokers, a 5 s lag, two topics with RF 3 under 200 records/s,
    and the agent."""
    return LabSpec(
        brokers=3,
        lag_ms=LAG_MS,
        topics=parse_topics("orders:6,payments:3"),
        rate=200,
        agent=str(agent) if agent else None,
        agent_options=AGENT_OPTIONS if agent else (),
        kafka=ZOOKEEPER_RELEASE,
    )


def kraft_session_spec(agent: Path | None) -> LabSpec:
    """The session's KRaft lab: Kafka 4.4.0, three combined nodes, the same lag, topics, load and agent as the
    ZooKeeper lab."""
    return replace(session_spec(agent), kafka=KAFKA_NEWEST)


# The KRaft labs the session started; the ZooKeeper lab's fixture stops them first.
KRAFT_LABS: list[Path] = []
ZOOKEEPER_LABS: list[Path] = []


def retire_kraft_labs() -> None:
    """Stop the session's KRaft lab (its tests ran: they come first) before the ZooKeeper lab starts."""
    for directory in KRAFT_LABS:
        down(directory, progress)


def retire_labs() -> None:
    """Stop both session labs once their tests ran (a worker of `make test` runs other tests after them: a lab takes
    about half a core); their fixtures' teardown still checks that no process is left."""
    for directory in (*KRAFT_LABS, *ZOOKEEPER_LABS):
        down(directory, progress)
    KRAFT_LABS.clear()
    ZOOKEEPER_LABS.clear()


@contextlib.contextmanager
def running_lab(directory: Path, spec: LabSpec) -> Iterator[Lab]:
    """A lab for the block; a failed start fails the test with the brokers' last log lines (it never skips)."""
    try:
        lab = up(directory, spec, progress)
    except LabError as exc:
        pytest.fail(f"the Kafka lab did not start:\n{exc}", pytrace=False)
    try:
        yield lab
    finally:
        down(directory, progress)
        left = [p.pid for p in load(directory).processes() if alive(p)]
        assert not left, f"isrwatch lab down left processes running: {left}"


def fault_over(lab: Lab, kind: str, timeout: float = 90) -> None:
    """Wait until the fault's detached helper has finished (its entry left lab.json)."""
    deadline = time.monotonic() + timeout
    while any(f.kind == kind for f in load(Path(lab.dir)).faults):
        assert time.monotonic() < deadline, f"the {kind} helper did not finish within {timeout} s"
        time.sleep(0.2)


def current(lab: Lab) -> Lab:
    """The lab as lab.json has it now: restarts give brokers new pids."""
    return load(Path(lab.dir))


def states(lab: Lab, topics: list[str] | None = None) -> States:
    """The partitions as the cluster has them now (ZooKeeper, or DescribeTopicPartitions in KRaft)."""
    return truth.partitions(current(lab), topics)


def wait_for(
    lab: Lab, what: str, check: Callable[[States], bool], topics: list[str] | None = None, timeout: float = 60
) -> tuple[float, States]:
    """Poll the cluster until `check(states)` holds; returns the seconds it took and those states."""
    started = time.monotonic()
    while True:
        now = states(lab, topics)
        if check(now):
            return time.monotonic() - started, now
        assert time.monotonic() - started < timeout, f"{what}: not within {timeout} s; partitions now:\n" + "\n".join(
            f"  {t}-{p}: leader {s.leader}, isr {list(s.isr)}, elr {list(s.elr)}" for (t, p), s in sorted(now.items())
        )
        time.sleep(0.2)


def full(now: States) -> bool:
    return bool(now) and all(s.leader >= 0 and set(s.isr) == set(s.replicas) for s in now.values())


def wait_healthy(lab: Lab, timeout: float = 120) -> float:
    """Wait until every broker runs and is registered and every lab partition has its full ISR again."""
    started = time.monotonic()
    unfenced = {b.id: False for b in lab.brokers}
    while (
        not all(alive(b) for b in current(lab).brokers)
        or _registered(current(lab)) != unfenced
        or not serving(current(lab))
    ):
        assert time.monotonic() - started < timeout, f"brokers {sorted(unfenced)} not all back within {timeout} s"
        time.sleep(0.2)
    wait_for(lab, "every ISR full again", full, timeout=max(1, timeout - (time.monotonic() - started)))
    return time.monotonic() - started


def _registered(lab: Lab) -> dict[int, bool] | None:
    """The registrations, or None while no broker answers (KRaft: a restarted node, and on a loaded machine the
    others for a moment, refuse connections)."""
    try:
        return registrations(lab)
    except LabError:
        return None


def shrunk_out(lab: Lab, broker: int, follows: set[tuple[str, int]], timeout: float = 40) -> tuple[float, States]:
    """Until the broker is out of the ISR of every partition it follows (its leaders shrank it)."""
    return wait_for(
        lab,
        f"broker {broker} out of the ISR of the partitions it follows",
        lambda s: all(broker not in s[k].isr for k in follows),
        timeout=timeout,
    )


def moved_out(lab: Lab, broker: int, leads: set[tuple[str, int]], timeout: float = 60) -> tuple[float, States]:
    """Until the broker leads none of `leads` and is in no ISR (the controller acted on its failure)."""
    return wait_for(
        lab,
        f"broker {broker}'s leaderships moved and it left every ISR",
        lambda s: all(s[k].leader != broker for k in leads) and all(broker not in x.isr for x in s.values()),
        timeout=timeout,
    )


def growing(lab: Lab, partitions: list[tuple[str, int]]) -> bool:
    """Whether every partition's log grew within 2 s (the producer keeps them growing, so a follower that stops
    fetching really falls behind)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=lab.bootstrap_servers)
    try:
        tps = [TopicPartition(t, p) for t, p in partitions]
        first = consumer.end_offsets(tps)
        time.sleep(2)
        return all(end > first[tp] for tp, end in consumer.end_offsets(tps).items())
    finally:
        consumer.close()


def followed(now: States, broker: int) -> set[tuple[str, int]]:
    """The partitions the broker follows (a replica, not the leader)."""
    return {key for key, s in now.items() if broker in s.replicas and s.leader != broker}


def led(now: States, broker: int) -> set[tuple[str, int]]:
    return {key for key, s in now.items() if s.leader == broker}


def active_controller(lab: Lab) -> tuple[int | None, int]:
    return truth.active_controller(current(lab))


def process_state(pid: int, until: str | None = None) -> str | None:
    """The process's state letter (T: stopped), after waiting up to 5 s for `until` (signals land asynchronously)."""
    deadline = time.monotonic() + 5
    while True:
        state = proc.state(pid)
        if until is None or state == until or time.monotonic() > deadline:
            return state
        time.sleep(0.05)


def report(what: str, seconds: float) -> None:
    print(f"\n  {what}: {seconds:.1f} s", flush=True)


def stall_over(lab: Lab) -> None:
    """Until the stall's helper has sent SIGCONT and gone (on a loaded machine, later than its --seconds)."""
    [fault] = [f for f in current(lab).faults if f.kind == "stall"]
    fault_over(lab, "stall", timeout=(fault.ends_ms + 30_000) / 1000 - time.time())


@dataclass
class Stall:
    """The session's stall of one broker for STALL_S, with what ZooKeeper showed during it (epoch ms: the brokers'
    clocks are this machine's)."""

    broker: int
    said: str
    state: str  # the broker's process state once SIGSTOP landed (T)
    before: States
    follows: set[tuple[str, int]]  # the partitions it followed
    shrunk: States  # once every leader it follows had shrunk it
    registered: bool  # still registered in ZooKeeper while stopped (a stall, not a crash)
    stall_ms: tuple[int, int]  # after SIGSTOP was sent, before SIGCONT (the helper sleeps once `ends_ms` was set)
    over_ms: int  # its helper gone
    window: FaultWindow


def run_stall(lab: Lab, broker: int = STALLED) -> Stall:
    wait_healthy(lab)
    before = states(lab)
    follows = followed(before, broker)
    window = fault_begins("stall")
    said = faults.stall(Path(lab.dir), broker, STALL_S)
    stopped_ms = int(time.time() * 1000)
    state = process_state(current(lab).broker(broker).pid, until="T")
    [fault] = [f for f in current(lab).faults if f.kind == "stall"]
    took, shrunk = shrunk_out(lab, broker, follows)
    report(f"stall: broker {broker} out of the ISR of all {len(follows)} partitions it follows after", took)
    registered = broker in registrations(current(lab))
    stall_over(lab)
    over_ms = int(time.time() * 1000)
    report("stall: every ISR full again after SIGCONT", wait_healthy(lab))
    window.over()
    return Stall(broker, said, state, before, follows, shrunk, registered, (stopped_ms, fault.ends_ms), over_ms, window)


@dataclass
class Restart:
    """The session's kill of a broker (neither the controller nor the stalled one) that leads partitions, its
    restart, and the preferred election that gave its leaderships back, with what ZooKeeper showed after each."""

    broker: int
    controller: int | None
    before: States
    leads: set[tuple[str, int]]
    slow_said: str  # a slow fault begun before the kill, ending while the broker is dead
    kill_said: str
    killed_ms: int  # before SIGKILL was sent
    dead: bool  # not alive right after the kill
    moved: States  # once its leaderships moved and it left every ISR
    registered: bool  # still registered in ZooKeeper then
    restart_said: str
    restarted: States  # healthy again after the restart
    window: FaultWindow  # the kill and restart, to healthy
    elect_said: str
    elected: States  # as the election answered
    healthy: States  # healthy again after the election


def run_restart(lab: Lab, stalled: int = STALLED) -> Restart:
    wait_healthy(lab)
    active, _ = active_controller(lab)
    before = states(lab)
    broker = next(b.id for b in lab.brokers if b.id not in (stalled, active) and led(before, b.id))
    leads = led(before, broker)
    started = time.monotonic()
    window = fault_begins("restart")
    # Its rate binds nothing (the producer sends ~20 KB/s): only its end, while the broker is dead, is tested.
    slow_said = faults.slow(Path(lab.dir), broker, 1, rate=100 * 1024 * 1024)
    killed_ms = int(time.time() * 1000)
    kill_said = faults.kill(Path(lab.dir), broker)
    dead = not alive(current(lab).broker(broker))
    took, moved = moved_out(lab, broker, leads)
    report(f"kill: broker {broker}'s {len(leads)} leaderships moved, out of every ISR after", took)
    registered = broker in registrations(current(lab))
    restart_said = faults.restart(Path(lab.dir), broker)
    report(f"restart: broker {broker} back in every ISR after", wait_healthy(lab))
    window.over()
    restarted = states(lab)
    report("kill to healthy", time.monotonic() - started)
    elect_window = fault_begins("elect")
    elect_said = faults.elect(Path(lab.dir))
    elected = states(lab)  # the election answered once done: no waiting
    report("elect: every ISR full after", wait_healthy(lab))
    elect_window.over()
    return Restart(
        broker,
        active,
        before,
        leads,
        slow_said,
        kill_said,
        killed_ms,
        dead,
        moved,
        registered,
        restart_said,
        restarted,
        window,
        elect_said,
        elected,
        states(lab),
    )


def _slow(lab: Lab) -> str:
    """A follower that fell behind (stalled past the lag) is throttled as it comes back: it fetches, slowly."""
    said = faults.stall(Path(lab.dir), 3, 8)
    stall_over(lab)
    said += " / " + faults.slow(Path(lab.dir), 3, 12)
    fault_over(lab, "slow")
    return said


def _controller_failover(lab: Lab) -> str:
    before = active_controller(lab)[1]
    said = faults.controller_failover(Path(lab.dir))
    wait_for(lab, "a new controller", lambda _: active_controller(lab)[1] > before, timeout=120)
    return said


def _stall(lab: Lab) -> str:
    said = faults.stall(Path(lab.dir), 2, STALL_S)
    stall_over(lab)
    return said


def _restart(lab: Lab) -> str:
    leader = next(b.id for b in lab.brokers if led(states(lab), b.id))
    return faults.restart(Path(lab.dir), leader)


# Every fault kind the reality suite holds isrwatch to, as run when no test of the session ran it.
FAULTS: dict[str, Callable[[Lab], str]] = {
    "stall": _stall,
    "slow": _slow,
    "restart": _restart,
    "elect": lambda lab: faults.elect(Path(lab.dir)),
    "controller-failover": _controller_failover,
}


def _fence(lab: Lab) -> str:
    said = faults.fence(Path(lab.dir), 2, FENCE_S)
    fault_over(lab, "fence", timeout=FENCE_S + 30)
    return said


# KRaft: every kind, and a broker paused past its session (fenced by the controller).
KRAFT_FAULTS: dict[str, Callable[[Lab], str]] = {**FAULTS, "fence": _fence}


def run_missing_faults(lab: Lab, kinds: dict[str, Callable[[Lab], str]], log: list[FaultWindow]) -> None:
    """Every fault kind the session has not run yet on the lab, once each, on a healthy cluster, waited out."""
    done = {w.kind for w in log if w.end_ms}
    for kind, act in kinds.items():
        if kind in done:
            continue
        wait_healthy(current(lab))
        window = fault_begins(kind, log)
        progress(f"{kind}: {act(current(lab))}")
        wait_healthy(current(lab), timeout=180)
        window.over()


def after_last_fault(seconds: float, log: list[FaultWindow] = FAULT_LOG) -> float:
    """Wait until `seconds` past the end of the lab's last fault (the brokers' clocks are this machine's), not a fixed
    time: the tests that ran since often took that long already. Returns the seconds waited."""
    last_ms = max((w.end_ms for w in log), default=0)
    waited = max(0.0, last_ms / 1000 + seconds - time.time())
    time.sleep(waited)
    return waited


@dataclass
class Streamed:
    """`isrwatch run --profile agent` over everything the agents sent during the session, every fault kind run."""

    store: str
    records: list[Record]
    windows: list[FaultWindow]
    frontier: int  # the store's event time for the lab's cluster: decided up to it

    @functools.cached_property
    def events(self) -> list[dict]:
        return [json.loads(r.value) for r in self.records]


def stream_session(
    lab: Lab,
    workdir: Path,
    kept: Path,
    kinds: dict[str, Callable[[Lab], str]] = FAULTS,
    log: list[FaultWindow] = FAULT_LOG,
) -> Streamed:
    """Run the missing fault kinds, wait out the last one, then stream the events topic from its start into a store
    (SQLite in `workdir`); the events are kept in `kept` (JSONL) for `isrwatch replay --profile agent`."""
    from isrwatch.streaming.job import JobOptions, StreamJob

    run_missing_faults(lab, kinds, log)
    after_last_fault(QUIET_S, log)
    started = time.monotonic()
    url = f"sqlite:///{workdir / 'isrwatch.db'}"
    StreamJob(
        JobOptions(
            source=f"kafka:{lab.monitor_bootstrap}/{EVENTS_TOPIC}",
            store=url,
            checkpoint=str(workdir / "checkpoint"),
            config=Config(replica_lag_time_max_ms=LAG_MS).with_profile("agent"),
            available_now=True,
        )
    ).run()
    with open_store(url) as store:
        frontier = store.event_time().clusters[lab.cluster]
    records = every_record(lab)
    with kept.open("wb") as out:
        out.writelines(r.value + b"\n" for r in records)
    report(f"isrwatch run over the session's {len(records):,} agent events", time.monotonic() - started)
    return Streamed(url, records, [w for w in log if w.end_ms], frontier)
