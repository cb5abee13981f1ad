"""The tests' real Kafka lab: started once per session by the same code as `isrwatch lab up`, and helpers
that read the cluster's truth (ISR, leaders, controller) from ZooKeeper and Kafka's admin API, never
from isrwatch.

Every monitored broker runs the project's isrwatch-agent (built with Maven when agent/target lacks it), sending
to the monitor broker's `isrwatch.events`. Suites that need other lab settings (another lag) extend
`session_spec()` or override the `lab_spec` fixture in tests/conftest.py; fault tests leave the cluster healthy
(`wait_healthy`).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from streaming.lab.cluster import (
    CHROOT,
    PROJECT_AGENT,
    Lab,
    LabError,
    LabSpec,
    PartitionState,
    alive,
    controller,
    down,
    load,
    parse_topics,
    partition_states,
    registered_brokers,
    up,
    zookeeper,
)
from streaming.lab.jars import tools_dir

States = dict[tuple[str, int], PartitionState]
# Short, so that faults show within seconds (a stalled follower is out after 5-7.5 s, well within a 10 s stall,
# itself safely inside the 18 s ZooKeeper session); >= replica.fetch.wait.max.ms as Kafka requires.
LAG_MS = 5000
# The agent's counters (written, dropped, failed) in each broker's stdout.log every 10 s, not once a minute.
AGENT_OPTIONS = (("stats.interval.ms", "10000"),)


@dataclass
class FaultWindow:
    """One fault a test ran on the session lab, from its start to the lab healthy again (epoch ms; 0: not over)."""

    kind: str  # a `isrwatch lab fault` kind: stall, slow, restart, elect, controller-failover
    start_ms: int
    end_ms: int = 0

    def over(self) -> None:
        self.end_ms = int(time.time() * 1000)


# Every fault the session ran, in order: the reality suite (tests/reality) holds isrwatch to what the brokers did
# during all of them, so no fault has to run twice.
FAULT_LOG: list[FaultWindow] = []


def fault_begins(kind: str) -> FaultWindow:
    """Log a fault for the reality suite; call `.over()` once the lab is healthy again."""
    window = FaultWindow(kind, int(time.time() * 1000))
    FAULT_LOG.append(window)
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
    if not PROJECT_AGENT.is_file():
        progress(f"building {PROJECT_AGENT} with Maven")
        agent_dir = PROJECT_AGENT.parents[1]
        argv = ["mvn", "-q", "-B", f"-Dmaven.repo.local={tools_dir() / 'm2'}", "-DskipTests", "package"]
        done = subprocess.run(argv, cwd=agent_dir, capture_output=True, text=True)
        if done.returncode != 0 or not PROJECT_AGENT.is_file():
            pytest.fail(f"building the agent failed: {' '.join(argv)}:\n{done.stdout}{done.stderr}", pytrace=False)
    return PROJECT_AGENT


def session_spec(agent: Path | None) -> LabSpec:
    """The session lab: 3 brokers, a 5 s lag, two topics with RF 3 under 200 records/s, and the agent."""
    return LabSpec(
        brokers=3,
        lag_ms=LAG_MS,
        topics=parse_topics("orders:6,payments:3"),
        rate=200,
        agent=str(agent) if agent else None,
        agent_options=AGENT_OPTIONS if agent else (),
    )


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
    with zookeeper(lab.zookeeper) as zk:
        return partition_states(zk, list(lab.topics) if topics is None else topics)


def wait_for(
    lab: Lab, what: str, check: Callable[[States], bool], topics: list[str] | None = None, timeout: float = 60
) -> tuple[float, States]:
    """Poll ZooKeeper until `check(states)` holds; returns the seconds it took and those states."""
    started = time.monotonic()
    names = list(lab.topics) if topics is None else topics
    with zookeeper(lab.zookeeper) as zk:
        while True:
            now = partition_states(zk, names)
            if check(now):
                return time.monotonic() - started, now
            assert time.monotonic() - started < timeout, (
                f"{what}: not within {timeout} s; partitions now:\n"
                + "\n".join(f"  {t}-{p}: leader {s.leader}, isr {list(s.isr)}" for (t, p), s in sorted(now.items()))
            )
            time.sleep(0.2)


def full(now: States) -> bool:
    return bool(now) and all(s.leader >= 0 and set(s.isr) == set(s.replicas) for s in now.values())


def wait_healthy(lab: Lab, timeout: float = 120) -> float:
    """Wait until every broker runs and is registered and every lab partition has its full ISR again."""
    started = time.monotonic()
    ids = {b.id for b in lab.brokers}
    with zookeeper(lab.zookeeper) as zk:
        while registered_brokers(zk, CHROOT) != ids or not all(alive(b) for b in current(lab).brokers):
            assert time.monotonic() - started < timeout, f"brokers {sorted(ids)} not all back within {timeout} s"
            time.sleep(0.2)
    wait_for(lab, "every ISR full again", full, timeout=max(1, timeout - (time.monotonic() - started)))
    return time.monotonic() - started


def followed(now: States, broker: int) -> set[tuple[str, int]]:
    """The partitions the broker follows (a replica, not the leader)."""
    return {key for key, s in now.items() if broker in s.replicas and s.leader != broker}


def led(now: States, broker: int) -> set[tuple[str, int]]:
    return {key for key, s in now.items() if s.leader == broker}


def active_controller(lab: Lab) -> tuple[int | None, int]:
    with zookeeper(lab.zookeeper) as zk:
        return controller(zk)
