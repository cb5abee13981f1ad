"""The lab cluster: N Kafka brokers, a monitor broker and a steady producer, in one of two modes.

- ZooKeeper mode (`--kafka 3.9`, the default): ZooKeeper and N Kafka 3.9.2 brokers. With
  `inter.broker.protocol.version=2.6` (the default) ISR changes go through ZooKeeper and are propagated the
  ZooKeeper-era way isrwatch models (2.5 s checks, 5 s linger, 60 s max delay); with `--ibp 3.9` leaders send
  AlterPartition to the controller. The monitor broker (id 100) is a one-broker cluster of its own under
  another ZooKeeper chroot.
- KRaft mode (`--kafka 4.x`): N combined broker+controller nodes of one static quorum (lab/kraft.py), and
  the monitor a one-node KRaft cluster of its own, same release.

Faults never touch the monitor, so isrwatch's own traffic (`isrwatch.events`, output topics) survives them.
The cluster's truth: ZooKeeper's partition state znodes in ZooKeeper mode; Kafka's admin API
(DescribeTopicPartitions, DescribeMetadataQuorum, DescribeCluster) in KRaft mode (`partitions`, `registrations`,
`active_controller` answer in either).

Everything lives under one directory: configs, data, logs, and `lab.json`, the record every command
(and every detached fault helper) reads and updates under a file lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from subprocess import PIPE, STDOUT
from typing import TYPE_CHECKING, Any, cast

from . import kraft
from .jars import KAFKA_NEWEST, ZOOKEEPER_RELEASE, JarsError, default_agent, ensure, kafka_release, kafka_set

if TYPE_CHECKING:
    from kazoo.client import KazooClient

Progress = Callable[[str], None]

LAB_JSON = "lab.json"
CHROOT = "/lab"
MONITOR_CHROOT = "/monitor"
MONITOR_ID = 100
CLUSTER_NAME = "lab"
EVENTS_TOPIC = "isrwatch.events"
# isrwatch's own traffic, on the monitor broker: the agent's events and `isrwatch run --kafka-output`'s topics.
MONITOR_TOPICS = {
    EVENTS_TOPIC: 3,
    "isrwatch.decisions": 3,
    "isrwatch.propagations": 3,
    "isrwatch.alter-partitions": 3,
    "isrwatch.incidents": 3,
}
ZOOKEEPER, KRAFT = "zookeeper", "kraft"  # the lab's modes
# Kafka stamps each record of isrwatch's topics with its own clock on append: for the events topic that
# timestamp is the events' arrival, which `ts_in_future` judges them against (SPEC §6); a CreateTime
# timestamp would be the sending broker's clock, the very clock being judged.
MONITOR_TOPIC_CONFIGS = {"message.timestamp.type": "LogAppendTime"}
# The monitor broker's default for every topic, so also for the events topic when an agent's first send
# auto-creates it before the lab does (the agents start sending as their brokers start).
MONITOR_BROKER_CONFIG = {"log.message.timestamp.type": "LogAppendTime"}
INTER_BROKER_PROTOCOL_VERSION = "2.6"  # below 2.7-IV2: the ZooKeeper ISR writer and its throttled propagation
# `--ibp`: 2.6 (ZooKeeper writes, the model isrwatch was built on) or 3.9 (AlterPartition to the controller).
INTER_BROKER_PROTOCOL_VERSIONS = (INTER_BROKER_PROTOCOL_VERSION, "3.9")
ZOOKEEPER_SESSION_TIMEOUT_MS = 18_000  # Kafka 3.9's default zookeeper.session.timeout.ms
REPLICA_FETCH_WAIT_MAX_MS = 500  # Kafka's default; replica.lag.time.max.ms may not be smaller
REPLICA_FETCH_MAX_BYTES = 8192
DEFAULT_TOPICS = "orders:6,payments:3"
REPLICATION_FACTOR = 3
# Sized for a 2-core, 24 GiB machine shared with Spark: small heaps, the serial collector (no GC
# threads competing for the two cores), two JIT threads, and small Kafka thread pools below.
JVM_FLAGS = ("-XX:+UseSerialGC", "-XX:CICompilerCount=2", "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true")
BROKER_HEAP_MAX = "512m"
ZOOKEEPER_HEAP = ("-Xms32m", "-Xmx128m")
BROKER_THREADS = {
    "num.network.threads": 2,
    "num.io.threads": 2,
    "num.replica.fetchers": 1,
    "background.threads": 2,
    "num.recovery.threads.per.data.dir": 1,
    "log.cleaner.threads": 1,
    "log.cleaner.dedupe.buffer.size": 16 * 2**20,
}


# Agent option values may name the broker they are given to: `{broker}` (its id) and `{logs}` (its
# kafka_logs_dir), e.g. `file={logs}/agent.events.jsonl` for one events file per broker.
AGENT_PLACEHOLDERS = ("{broker}", "{logs}")


class LabError(RuntimeError):
    """The lab cannot do what was asked; the message says why (with the last log lines of a failed start)."""


@dataclass(frozen=True)
class Topic:
    name: str
    partitions: int


def parse_topics(spec: str) -> tuple[Topic, ...]:
    """`orders:6,payments:3` -> topics; each NAME:PARTITIONS."""
    topics = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, sep, count = item.partition(":")
        if not sep or not name or not count.isdigit() or int(count) < 1:
            raise LabError(f"--topics {spec!r}: expected NAME:PARTITIONS[,NAME:PARTITIONS...], got {item!r}")
        topics.append(Topic(name, int(count)))
    if not topics:
        raise LabError("--topics: give at least one NAME:PARTITIONS")
    if len({t.name for t in topics}) != len(topics):
        raise LabError(f"--topics {spec!r}: a topic is named twice")
    return tuple(topics)


@dataclass(frozen=True)
class LabSpec:
    """What `isrwatch lab up` starts."""

    brokers: int = 3
    lag_ms: int = 10_000  # replica.lag.time.max.ms
    topics: tuple[Topic, ...] = parse_topics(DEFAULT_TOPICS)
    rate: int = 200  # producer records per second over all lab topics; 0 = no producer
    agent: str | None = None  # a -javaagent jar for every monitored broker
    agent_options: tuple[tuple[str, str], ...] = ()  # values may hold AGENT_PLACEHOLDERS
    start_timeout_s: float = 180.0  # for the brokers to register, and again for the topics to get full ISRs
    broker_heap: str = BROKER_HEAP_MAX  # -Xmx of every monitored broker
    broker_config: tuple[tuple[str, str], ...] = ()  # more server.properties for every monitored broker
    kafka: str = KAFKA_NEWEST  # `--kafka`: a release or a line (4.4 -> 4.4.0); 4.x is KRaft, 3.9 ZooKeeper mode
    ibp: str | None = None  # `--ibp`, ZooKeeper mode only (default INTER_BROKER_PROTOCOL_VERSION)

    def release(self) -> str:
        try:
            return kafka_release(self.kafka)
        except JarsError as exc:
            raise LabError(str(exc)) from None

    def mode(self) -> str:
        return ZOOKEEPER if self.release() == ZOOKEEPER_RELEASE else KRAFT

    def check(self) -> None:
        if self.ibp is not None and self.mode() == KRAFT:
            raise LabError(
                f"--ibp {self.ibp}: only for ZooKeeper mode (--kafka 3.9); KRaft brokers (--kafka {self.kafka}) have "
                "no inter.broker.protocol.version and always send AlterPartition"
            )
        if self.ibp is not None and self.ibp not in INTER_BROKER_PROTOCOL_VERSIONS:
            raise LabError(
                f"--ibp {self.ibp}: must be {' or '.join(INTER_BROKER_PROTOCOL_VERSIONS)} (ZooKeeper writes the ISR "
                "below 2.7; AlterPartition from 2.7 on)"
            )
        if not 3 <= self.brokers <= 9:
            raise LabError(f"--brokers {self.brokers}: must be 3..9 (topics have replication factor 3)")
        if self.lag_ms < REPLICA_FETCH_WAIT_MAX_MS:
            raise LabError(
                f"--lag-ms {self.lag_ms}: must be >= replica.fetch.wait.max.ms "
                f"({REPLICA_FETCH_WAIT_MAX_MS}), as Kafka requires"
            )
        if self.rate < 0:
            raise LabError(f"--rate {self.rate}: must be >= 0")
        if self.agent is not None and not Path(self.agent).is_file():
            if Path(self.agent).resolve() == default_agent().resolve():
                raise LabError(f"--agent: {default_agent()} is not built yet: run `make agent` (Java 17, Maven)")
            raise LabError(f"--agent {self.agent}: no such file")


@dataclass
class Process:
    """A process the lab starts; `start` (its start time since boot) guards against a recycled pid."""

    pid: int = 0
    start: int = 0
    log: str = ""  # where its stdout and stderr go
    argv: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class Broker(Process):
    id: int
    port: int
    log_dir: str  # Kafka's log.dirs: the partitions' data
    kafka_logs_dir: str  # server.log, state-change.log, controller.log, scheduler.log
    config: str
    controller_port: int | None = None  # KRaft: its CONTROLLER listener (every node is a voter)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


@dataclass
class Fault:
    """A fault that is still under way: its detached helper ends it (or restarts the broker)."""

    id: str
    kind: str
    broker: int | None
    ends_ms: int | None  # wall-clock epoch ms when it ends by itself, if it does
    helper: Process
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Lab:
    """The contents of lab.json."""

    dir: str
    bootstrap_servers: str
    monitor_bootstrap: str
    brokers: list[Broker]
    monitor: Broker
    topics: dict[str, int]
    replication_factor: int
    replica_lag_time_max_ms: int
    mode: str = ZOOKEEPER  # ZOOKEEPER or KRAFT
    kafka_version: str = ZOOKEEPER_RELEASE
    # ZooKeeper mode
    zookeeper: str | None = None  # host:port of the ZooKeeper server
    zookeeper_connect: str | None = None  # the monitored cluster's zookeeper.connect (with its chroot)
    zookeeper_process: Process | None = None
    zookeeper_session_timeout_ms: int | None = None
    inter_broker_protocol_version: str | None = None
    # KRaft mode
    controller_quorum: str | None = None  # the monitored cluster's controller.quorum.voters (every node a voter)
    controller_bootstrap: str | None = None  # its controllers' listeners (bootstrap.controllers)
    cluster_id: str | None = None
    broker_session_timeout_ms: int | None = None
    broker_heartbeat_interval_ms: int | None = None
    features: dict[str, int] = field(default_factory=dict)  # finalized feature levels, as the cluster reported them
    cluster: str = CLUSTER_NAME
    events_topic: str = EVENTS_TOPIC
    producer: Process | None = None
    producer_rate: int = 0
    agent: str | None = None
    agent_options: dict[str, str] = field(default_factory=dict)
    faults: list[Fault] = field(default_factory=list)
    started_ms: int = 0

    def broker(self, broker_id: int) -> Broker:
        for b in self.brokers:
            if b.id == broker_id:
                return b
        raise LabError(
            f"--broker {broker_id}: the lab's brokers are {', '.join(str(b.id) for b in self.brokers)}"
            f" (the monitor broker {MONITOR_ID} takes no faults)"
        )

    def processes(self) -> list[Process]:
        return [*self.brokers, self.monitor, *filter(None, [self.zookeeper_process, self.producer])]

    def running(self) -> bool:
        """Whether the lab runs: ZooKeeper (ZooKeeper mode) or the monitor (KRaft), which faults never stop."""
        return alive(self.zookeeper_process if self.mode == ZOOKEEPER else self.monitor)

    def session_timeout_ms(self) -> int:
        """How long a broker may be silent before the cluster treats it as failed: its ZooKeeper session, or its
        KRaft broker session with the controller."""
        timeout = self.zookeeper_session_timeout_ms if self.mode == ZOOKEEPER else self.broker_session_timeout_ms
        assert timeout is not None, f"{self.dir}/{LAB_JSON} lacks the {self.mode} session timeout"
        return timeout

    def answering(self) -> tuple[str, int | None]:
        """The bootstrap servers of the brokers that can answer now (running, listening, not paused by a stall: a
        paused broker accepts connections but replies to nothing; a restarted one listens only once it registered),
        and one of them to ask (None: none can)."""
        answering = [b for b in self.brokers if alive(b) and not paused(b) and _listening(b.port)]
        if not answering:
            return self.bootstrap_servers, None
        return ",".join(b.address for b in answering), answering[0].id

    def answering_bootstrap(self) -> str:
        return self.answering()[0]

    def stream_options(self) -> list[str]:
        """`isrwatch run`'s options for the agents' events of this lab: its events topic, at its lag."""
        return [
            "--source",
            f"kafka:{self.monitor_bootstrap}/{self.events_topic}",
            "--profile",
            "agent",
            "--set",
            f"replica_lag_time_max_ms={self.replica_lag_time_max_ms}",
        ]


# -- lab.json ------------------------------------------------------------------------------------


def _decode(raw: dict) -> Lab:
    def proc(d: dict | None) -> Process | None:
        return Process(**d) if d else None

    return Lab(
        **{
            **raw,
            "brokers": [Broker(**b) for b in raw["brokers"]],
            "monitor": Broker(**raw["monitor"]),
            "zookeeper_process": proc(raw["zookeeper_process"]),
            "producer": proc(raw.get("producer")),
            "faults": [Fault(**{**f, "helper": proc(f["helper"])}) for f in raw.get("faults", [])],
        }
    )


def load(directory: Path) -> Lab:
    path = Path(directory) / LAB_JSON
    try:
        return _decode(json.loads(path.read_text()))
    except FileNotFoundError:
        raise LabError(f"--dir {directory}: no lab there ({LAB_JSON} missing; start one: isrwatch lab up)") from None
    except (ValueError, TypeError, KeyError) as exc:
        raise LabError(f"{path}: not a lab record ({exc})") from None


def save(lab: Lab) -> None:
    path = Path(lab.dir) / LAB_JSON
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(asdict(lab), indent=1) + "\n")
    os.replace(tmp, path)


@contextlib.contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Serialise lab.json updates between commands and fault helpers."""
    with open(Path(directory) / ".lab.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@contextlib.contextmanager
def editing(directory: Path) -> Iterator[Lab]:
    """Load lab.json under the lock and save it back when the block ends without error."""
    with locked(directory):
        lab = load(directory)
        yield lab
        save(lab)


# -- processes -----------------------------------------------------------------------------------


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, None if it is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


def alive(proc: Process | None) -> bool:
    """Whether the process the lab started is still running (a zombie child is reaped and counts as gone)."""
    if proc is None or proc.pid <= 0:
        return False
    with contextlib.suppress(ChildProcessError):
        os.waitpid(proc.pid, os.WNOHANG)
    return _start_time(proc.pid) == proc.start


def paused(proc: Process | None) -> bool:
    """Whether the process the lab started is stopped (SIGSTOP, e.g. by a stall): it answers nothing until SIGCONT."""
    if not alive(proc):
        return False
    try:
        return Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


def send(proc: Process | None, sig: int) -> bool:
    """Signal the process if it is still the one the lab started; False if it is gone."""
    if not alive(proc):
        return False
    try:
        os.kill(proc.pid, sig)
    except ProcessLookupError:
        return False
    return True


def launch(proc: Process) -> None:
    """Start the process detached (own session, no stdin), stdout and stderr appended to its log."""
    Path(proc.log).parent.mkdir(parents=True, exist_ok=True)
    with open(proc.log, "ab") as out:
        popen = subprocess.Popen(
            proc.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    proc.pid, proc.start = popen.pid, _start_time(popen.pid) or 0


def wait_gone(procs: list[Process], timeout: float) -> list[Process]:
    """Wait until the processes have exited; returns those still running after `timeout`."""
    deadline = time.monotonic() + timeout
    while (left := [p for p in procs if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def tail_text(text: str, lines: int = 20) -> str:
    """The last lines of a text, indented for an error message."""
    return "\n".join(f"    {line}" for line in text.splitlines()[-lines:])


def tail(path: str | Path, lines: int = 20) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return f"    ({path}: no such file)"
    return tail_text(text, lines) or f"    ({path} is empty)"


def broker_logs(broker: Broker, lines: int = 20) -> str:
    """The last lines of a broker's server.log and of its stdout (where a JVM that cannot start complains)."""
    return (
        f"  {broker.kafka_logs_dir}/server.log:\n{tail(Path(broker.kafka_logs_dir) / 'server.log', lines)}\n"
        f"  {broker.log}:\n{tail(broker.log, lines)}"
    )


# -- ZooKeeper, the cluster's truth ----------------------------------------------------------------


@dataclass(frozen=True)
class PartitionState:
    """A partition as the cluster holds it: in ZooKeeper mode the leader's (or controller's) last write of its state
    znode; in KRaft mode what DescribeTopicPartitions reports, which has no partition epoch, controller epoch or
    write time (-1, -1, 0: the admin API does not expose them)."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    partition_epoch: int  # the state znode's version
    mtime_ms: int  # when it was written
    elr: tuple[int, ...] = ()  # KRaft: eligible leader replicas (KIP-966)
    last_known_elr: tuple[int, ...] = ()  # KRaft: the last known ELR

    @property
    def preferred_leader(self) -> int:
        return self.replicas[0]


def _kazoo(hosts: str, timeout: float) -> KazooClient:
    """A kazoo client that logs nothing (the lab reports what matters itself)."""
    from kazoo.client import KazooClient

    quiet = logging.getLogger("isrwatch.lab.kazoo")
    quiet.setLevel(logging.CRITICAL)
    return KazooClient(hosts=hosts, timeout=timeout, logger=quiet)


@contextlib.contextmanager
def zookeeper(hosts: str, timeout: float = 10.0) -> Iterator[KazooClient]:
    """A started ZooKeeper client, stopped on exit."""
    client = _kazoo(hosts, timeout)
    try:
        client.start(timeout=timeout)
    except Exception as exc:
        client.close()
        raise LabError(f"ZooKeeper at {hosts} does not answer ({type(exc).__name__}): is the lab up?") from None
    try:
        yield client
    finally:
        client.stop()
        client.close()


def registered_brokers(zk: KazooClient, chroot: str) -> set[int]:
    path = f"{chroot}/brokers/ids"
    return {int(b) for b in zk.get_children(path)} if zk.exists(path) else set()


def controller(zk: KazooClient, chroot: str = CHROOT) -> tuple[int | None, int]:
    """The active controller's broker id (None while there is none) and the controller epoch."""
    try:
        data, _ = zk.get(f"{chroot}/controller")
        active = json.loads(data)["brokerid"]
    except Exception:  # NoNodeError or a half-written node: no controller right now
        active = None
    try:
        epoch = int(zk.get(f"{chroot}/controller_epoch")[0])
    except Exception:
        epoch = 0
    return active, epoch


def partition_states(zk: KazooClient, topics: list[str], chroot: str = CHROOT) -> dict[tuple[str, int], PartitionState]:
    """Every partition of the topics as ZooKeeper has it now (partitions without state yet are left out)."""
    from kazoo.exceptions import NoNodeError

    states = {}
    for topic in topics:
        try:
            assignment = json.loads(zk.get(f"{chroot}/brokers/topics/{topic}")[0])["partitions"]
        except NoNodeError:
            continue
        for p, replicas in assignment.items():
            try:
                data, stat = zk.get(f"{chroot}/brokers/topics/{topic}/partitions/{p}/state")
            except NoNodeError:
                continue
            s = json.loads(data)
            states[(topic, int(p))] = PartitionState(
                topic,
                int(p),
                tuple(replicas),
                s["leader"],
                s["leader_epoch"],
                tuple(s["isr"]),
                s["controller_epoch"],
                stat.version,
                stat.mtime,
            )
    return states


def wait_until(
    what: str,
    check: Callable[[], bool],
    timeout: float,
    interval: float = 0.25,
    failed: Callable[[], str | None] = lambda: None,
) -> float:
    """Poll `check` until it holds; returns the seconds it took. `failed` may name a reason to stop early."""
    started = time.monotonic()
    while not check():
        reason = failed()
        if reason:
            raise LabError(f"{what}: {reason}")
        if time.monotonic() - started > timeout:
            raise LabError(f"{what}: not after {timeout:g} s")
        time.sleep(interval)
    return time.monotonic() - started


def isr_full(lab: Lab) -> bool:
    """Every partition of the lab's topics has a leader and all its replicas in the ISR."""
    states = partitions(lab)
    return len(states) == sum(lab.topics.values()) and all(
        s.leader >= 0 and set(s.isr) == set(s.replicas) for s in states.values()
    )


# -- the cluster's truth, in either mode --------------------------------------------------------


def _asked(question: Callable[[], Any]) -> Any:
    try:
        return question()
    except kraft.Unanswered as exc:
        raise LabError(f"no broker answered: {exc}") from None


def partitions(lab: Lab, topics: list[str] | None = None) -> dict[tuple[str, int], PartitionState]:
    """Every partition of the topics (default: the lab's): from ZooKeeper's state znodes in ZooKeeper mode, from
    DescribeTopicPartitions (leader, leader epoch, ISR, ELR, last-known ELR) in KRaft mode."""
    names = list(lab.topics) if topics is None else topics
    if lab.mode == ZOOKEEPER:
        with zookeeper(str(lab.zookeeper)) as zk:
            return partition_states(zk, names)
    described = _asked(lambda: kraft.describe_partitions(*lab.answering(), names))
    return {
        (p["topic"], p["partition_index"]): PartitionState(
            p["topic"],
            p["partition_index"],
            tuple(p["replica_nodes"]),
            p["leader_id"],
            p["leader_epoch"],
            tuple(p["isr_nodes"]),
            -1,
            -1,
            0,
            tuple(p["eligible_leader_replicas"] or ()),  # null when the release or feature level has no ELR
            tuple(p["last_known_elr"] or ()),
        )
        for p in described
    }


def partition_epochs(lab: Lab, progress: Progress = lambda _: None) -> dict[tuple[str, int], int]:
    """Every partition's partition epoch: the state znode's version in ZooKeeper mode; in KRaft counted from the
    metadata log of a running node (DumpLogSegments, a JVM: seconds, not for polling), as no admin API reports it.
    A topic deleted and created again keeps only the new topic id's count."""
    if lab.mode == ZOOKEEPER:
        return {key: s.partition_epoch for key, s in partitions(lab).items()}
    node = next((b for b in lab.brokers if alive(b)), lab.brokers[0])
    segments = sorted(str(f) for f in (Path(node.log_dir) / f"{kraft.METADATA_TOPIC}-0").glob("*.log"))
    argv = [kraft.dump_log_segments(lab.kafka_version), "--cluster-metadata-decoder", "--files", ",".join(segments)]
    epochs = kraft.partition_epochs(run_tool(argv, progress, 120, lab.kafka_version))
    return {key: epoch for key, epoch in epochs.items() if key[0] in lab.topics}


def registrations(lab: Lab) -> dict[int, bool]:
    """The monitored cluster's registered brokers and whether each is fenced: ZooKeeper's /brokers/ids (a registered
    broker is never fenced there), or DescribeCluster with fenced brokers in KRaft mode."""
    if lab.mode == ZOOKEEPER:
        with zookeeper(str(lab.zookeeper)) as zk:
            return dict.fromkeys(registered_brokers(zk, CHROOT), False)
    return _asked(lambda: kraft.describe_brokers(*lab.answering()))  # type: ignore[no-any-return]


def serving(lab: Lab) -> bool:
    """Whether every broker answers requests itself. KRaft: a restarted node opens its listener only once its new
    incarnation registered and was unfenced, and until then the controller may still list the old incarnation as
    unfenced (it keeps the registration until the new one replaces it, or a new controller restarts every
    session), leading partitions nobody serves. ZooKeeper mode: its registration says it."""
    if lab.mode == ZOOKEEPER:
        return True
    try:
        return all(kraft.describe_brokers(b.address, b.id, tries=1) for b in lab.brokers)
    except kraft.Unanswered:
        return False


def active_controller(lab: Lab) -> tuple[int | None, int]:
    """The active controller and its epoch: the /controller znode and controller epoch in ZooKeeper mode, the
    metadata quorum's leader and leader epoch (DescribeMetadataQuorum) in KRaft mode; None while there is none."""
    if lab.mode == ZOOKEEPER:
        with zookeeper(str(lab.zookeeper)) as zk:
            return controller(zk)
    quorum = _asked(lambda: kraft.describe_quorum(*lab.answering()))
    return (quorum.leader if quorum.leader >= 0 else None), quorum.leader_epoch


# -- configuration -------------------------------------------------------------------------------


def _properties(values: dict[str, Any]) -> str:
    return "".join(f"{k}={v}\n" for k, v in values.items())


LOG4J = (
    """# Kafka's config/log4j.properties layout, plain files; state changes and the scheduler at TRACE.
log4j.rootLogger=INFO, kafkaAppender
log4j.appender.kafkaAppender=org.apache.log4j.FileAppender
log4j.appender.kafkaAppender.File=${kafka.logs.dir}/server.log
log4j.appender.kafkaAppender.layout=org.apache.log4j.PatternLayout
log4j.appender.kafkaAppender.layout.ConversionPattern=[%d] %p %m (%c)%n
"""
    + "".join(
        f"""log4j.appender.{name}=org.apache.log4j.FileAppender
log4j.appender.{name}.File=${{kafka.logs.dir}}/{file}
log4j.appender.{name}.layout=org.apache.log4j.PatternLayout
log4j.appender.{name}.layout.ConversionPattern=[%d] %p %m (%c)%n
"""
        for name, file in (
            ("stateChangeAppender", "state-change.log"),
            ("controllerAppender", "controller.log"),
            ("requestAppender", "kafka-request.log"),
            ("cleanerAppender", "log-cleaner.log"),
            ("schedulerAppender", "scheduler.log"),
        )
    )
    + """log4j.logger.org.apache.zookeeper=INFO
log4j.logger.kafka=INFO
log4j.logger.org.apache.kafka=INFO
log4j.logger.kafka.request.logger=WARN, requestAppender
log4j.additivity.kafka.request.logger=false
log4j.logger.kafka.network.RequestChannel$=WARN, requestAppender
log4j.additivity.kafka.network.RequestChannel$=false
log4j.logger.kafka.controller=TRACE, controllerAppender
log4j.additivity.kafka.controller=false
log4j.logger.kafka.log.LogCleaner=INFO, cleanerAppender
log4j.additivity.kafka.log.LogCleaner=false
# Every LeaderAndIsr request a broker receives, per partition.
log4j.logger.state.change.logger=TRACE, stateChangeAppender
log4j.additivity.state.change.logger=false
# "Beginning execution of scheduled task 'isr-expiration'": the real run times of the ISR checks.
log4j.logger.org.apache.kafka.server.util.KafkaScheduler=TRACE, schedulerAppender
log4j.additivity.org.apache.kafka.server.util.KafkaScheduler=false
"""
)


ZOOKEEPER_LOG4J = """log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File=${zookeeper.log}
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
"""


def broker_config(
    broker_id: int, port: int, log_dir: Path, zookeeper_connect: str, spec: LabSpec, replication_factor: int
) -> dict[str, Any]:
    """The server.properties of a ZooKeeper-mode lab broker (the monitor has replication factor 1)."""
    return {
        "broker.id": broker_id,
        "listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "zookeeper.connect": zookeeper_connect,
        "zookeeper.session.timeout.ms": ZOOKEEPER_SESSION_TIMEOUT_MS,
        "inter.broker.protocol.version": spec.ibp or INTER_BROKER_PROTOCOL_VERSION,
        **replication_config(log_dir, spec, replication_factor),
    }


def replication_config(log_dir: Path, spec: LabSpec, replication_factor: int) -> dict[str, Any]:
    """The server.properties every lab broker has, in either mode: its data, the lag, replication and thread pools."""
    return {
        "log.dirs": log_dir,
        "replica.lag.time.max.ms": spec.lag_ms,
        "replica.fetch.wait.max.ms": REPLICA_FETCH_WAIT_MAX_MS,
        "default.replication.factor": replication_factor,
        "offsets.topic.replication.factor": replication_factor,
        "offsets.topic.num.partitions": 4,
        "transaction.state.log.replication.factor": replication_factor,
        "transaction.state.log.min.isr": 1,
        "transaction.state.log.num.partitions": 4,
        "group.initial.rebalance.delay.ms": 0,
        # Leaders stay where faults put them until `isrwatch lab fault elect`.
        "auto.leader.rebalance.enable": "false",
        # Small fetches, so that a follower that fell behind needs several to catch up at the lab's light
        # load, and a replication throttle (`fault slow`) holds it back.
        "replica.fetch.max.bytes": REPLICA_FETCH_MAX_BYTES,
        **BROKER_THREADS,
    }


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home and (Path(home) / "bin" / "java").exists() else shutil.which("java")
    if not java:
        raise LabError("java is not installed (Kafka needs Java 17): run `bash scripts/provision.sh`")
    return java


def _free_ports(count: int) -> list[int]:
    """Distinct loopback ports nothing listens on now (held together so no two are the same)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


def _port_free(port: int) -> bool:
    """Nothing listens on the port (connections left in TIME_WAIT do not count: servers reuse the address)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _agent_argument(spec: LabSpec, monitor_bootstrap: str, broker_id: int, logs: Path) -> list[str]:
    if spec.agent is None:
        return []
    options = {
        "bootstrap.servers": monitor_bootstrap,
        "topic": EVENTS_TOPIC,
        "cluster": CLUSTER_NAME,
        **dict(spec.agent_options),
    }
    values = {"{broker}": str(broker_id), "{logs}": str(logs)}

    def placed(value: str) -> str:
        for name, actual in values.items():
            value = value.replace(name, actual)
        return value

    return [f"-javaagent:{Path(spec.agent).resolve()}=" + ",".join(f"{k}={placed(v)}" for k, v in options.items())]


def _plan(directory: Path, spec: LabSpec, java: str, classpath: str) -> Lab:
    """Write every config file and describe the lab to start (no process yet)."""
    config_dir = directory / "config"
    config_dir.mkdir(parents=True, exist_ok=True)
    mode = spec.mode()
    if mode == KRAFT:
        log_config = config_dir / "log4j2.xml"
        log_config.write_text(kraft.LOG4J2)
        log_flag = f"-Dlog4j2.configurationFile={log_config}"
        # The monitored nodes' and the monitor's PLAINTEXT and CONTROLLER ports.
        monitor_port, monitor_controller, *rest = _free_ports(2 * (spec.brokers + 1))
        ports, controller_ports = rest[: spec.brokers], rest[spec.brokers :]
    else:
        log_config = config_dir / "log4j.properties"
        log_config.write_text(LOG4J)
        log_flag = f"-Dlog4j.configuration={log_config.as_uri()}"
        zk_port, monitor_port, *ports = _free_ports(2 + spec.brokers)
    monitor_bootstrap = f"127.0.0.1:{monitor_port}"
    zookeeper = f"127.0.0.1:{zk_port}" if mode == ZOOKEEPER else ""
    quorum = kraft.voters(list(enumerate(controller_ports, start=1))) if mode == KRAFT else ""

    def jvm(heap: tuple[str, ...], *rest: str) -> list[str]:
        return [java, *heap, *JVM_FLAGS, *rest, "-cp", classpath]

    def broker(broker_id: int, port: int, rf: int, controller_port: int | None = None) -> Broker:
        monitor = broker_id == MONITOR_ID
        home = directory / ("monitor" if monitor else f"broker-{broker_id}")
        log_dir, logs = home / "data", home / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        logs.mkdir(parents=True, exist_ok=True)
        config = config_dir / f"{home.name}.properties"
        if controller_port is None:
            chroot = MONITOR_CHROOT if monitor else CHROOT
            values = broker_config(broker_id, port, log_dir, zookeeper + chroot, spec, rf)
        else:
            voters = kraft.voters([(broker_id, controller_port)]) if monitor else quorum
            values = kraft.node_config(broker_id, port, controller_port, voters)
            values.update(replication_config(log_dir, spec, rf))
        config.write_text(_properties({**values, **(MONITOR_BROKER_CONFIG if monitor else dict(spec.broker_config))}))
        heap = ("-Xms128m", f"-Xmx{BROKER_HEAP_MAX if monitor else spec.broker_heap}")
        agent = [] if monitor else _agent_argument(spec, monitor_bootstrap, broker_id, logs)
        argv = [*jvm(heap, log_flag, f"-Dkafka.logs.dir={logs}", *agent), "kafka.Kafka", str(config)]
        return Broker(
            id=broker_id,
            port=port,
            log_dir=str(log_dir),
            kafka_logs_dir=str(logs),
            config=str(config),
            log=str(logs / "stdout.log"),
            argv=argv,
            controller_port=controller_port,
        )

    lab = Lab(
        dir=str(directory),
        bootstrap_servers=",".join(f"127.0.0.1:{p}" for p in ports),
        monitor_bootstrap=monitor_bootstrap,
        brokers=[],
        monitor=broker(MONITOR_ID, monitor_port, 1, monitor_controller if mode == KRAFT else None),
        topics={t.name: t.partitions for t in spec.topics},
        replication_factor=REPLICATION_FACTOR,
        replica_lag_time_max_ms=spec.lag_ms,
        mode=mode,
        kafka_version=spec.release(),
        agent=str(Path(spec.agent).resolve()) if spec.agent else None,
        agent_options=dict(spec.agent_options),
    )
    if mode == KRAFT:
        lab.brokers = [broker(i, p, REPLICATION_FACTOR, controller_ports[i - 1]) for i, p in enumerate(ports, start=1)]
        lab.controller_quorum = quorum
        lab.controller_bootstrap = ",".join(f"127.0.0.1:{c}" for c in controller_ports)
        lab.cluster_id = kraft.cluster_id()
        lab.broker_session_timeout_ms = kraft.BROKER_SESSION_TIMEOUT_MS
        lab.broker_heartbeat_interval_ms = kraft.BROKER_HEARTBEAT_INTERVAL_MS
        return lab
    zk_dir = directory / "zookeeper"
    (zk_dir / "data").mkdir(parents=True, exist_ok=True)
    zk_config = config_dir / "zookeeper.properties"
    zk_config.write_text(
        _properties(
            {
                "dataDir": zk_dir / "data",
                "clientPort": zk_port,
                "clientPortAddress": "127.0.0.1",
                "maxClientCnxns": 0,
                "admin.enableServer": "false",
                "tickTime": 2000,
            }
        )
    )
    zk_log4j = config_dir / "zookeeper-log4j.properties"
    zk_log4j.write_text(ZOOKEEPER_LOG4J.replace("${zookeeper.log}", str(zk_dir / "zookeeper.log")))
    lab.brokers = [broker(i, p, REPLICATION_FACTOR) for i, p in enumerate(ports, start=1)]
    lab.zookeeper = zookeeper
    lab.zookeeper_connect = zookeeper + CHROOT
    lab.zookeeper_process = Process(
        log=str(zk_dir / "stdout.log"),
        argv=[
            *jvm(ZOOKEEPER_HEAP, f"-Dlog4j.configuration={zk_log4j.as_uri()}"),
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            str(zk_config),
        ],
    )
    lab.zookeeper_session_timeout_ms = ZOOKEEPER_SESSION_TIMEOUT_MS
    lab.inter_broker_protocol_version = spec.ibp or INTER_BROKER_PROTOCOL_VERSION
    return lab


def _clear(directory: Path) -> None:
    """Make `directory` ready for a new lab: new or empty, or an old lab's (whose data and logs go)."""
    if (directory / LAB_JSON).exists():
        old = load(directory)
        if any(alive(p) for p in old.processes()):
            raise LabError(f"a lab is running in {directory}: stop it first (isrwatch lab down --dir {directory})")
        for name in ["config", "zookeeper", "monitor", "faults", *(Path(b.log_dir).parent.name for b in old.brokers)]:
            shutil.rmtree(directory / name, ignore_errors=True)
        for name in (LAB_JSON, "producer.log"):
            (directory / name).unlink(missing_ok=True)
    elif directory.exists() and any(p for p in directory.iterdir() if p.name != ".lab.lock"):
        raise LabError(f"--dir {directory}: not empty and not a lab; give a new or empty directory")
    directory.mkdir(parents=True, exist_ok=True)


# -- up and down ---------------------------------------------------------------------------------


def _wait_registered(lab: Lab, zk: KazooClient, timeout: float) -> float:
    expected = [(b, CHROOT) for b in lab.brokers] + [(lab.monitor, MONITOR_CHROOT)]

    def missing() -> list[Broker]:
        ids = {CHROOT: registered_brokers(zk, CHROOT), MONITOR_CHROOT: registered_brokers(zk, MONITOR_CHROOT)}
        return [b for b, chroot in expected if b.id not in ids[chroot]]

    def failed() -> str | None:
        dead = [b for b in missing() if not alive(b)]
        return (
            None
            if not dead
            else "\n".join(f"broker {b.id} exited during start-up; its last log lines:\n{broker_logs(b)}" for b in dead)
        )

    try:
        return wait_until("starting the brokers", lambda: not missing(), timeout, failed=failed)
    except LabError as exc:
        if "not after" not in str(exc):
            raise
        raise LabError(
            f"{exc}; brokers not registered in ZooKeeper: "
            + "\n".join(f"broker {b.id}, last log lines:\n{broker_logs(b)}" for b in missing())
        ) from None


def _create_topics(
    bootstrap: str,
    topics: dict[str, int],
    replication_factor: int,
    timeout: float = 60,
    configs: dict[str, str] | None = None,
) -> None:
    """Create the topics (with the topic `configs`), retrying while the cluster settles (the controller may not
    know every broker yet, and thousands of partitions take the controller longer than one request's timeout)."""
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import KafkaError, TopicAlreadyExistsError

    deadline = time.monotonic() + timeout
    while True:
        try:
            admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="isrwatch-lab")
            try:
                admin.create_topics(
                    [NewTopic(name, count, replication_factor, topic_configs=configs) for name, count in topics.items()]
                )
            finally:
                admin.close()
            return
        except TopicAlreadyExistsError:  # an earlier try went through
            return
        except KafkaError as exc:
            if time.monotonic() > deadline:
                raise LabError(f"creating topics {', '.join(topics)} on {bootstrap}: {exc}") from None
            time.sleep(0.5)


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def start_producer(lab: Lab, rate: int, topics: dict[str, int] | None = None) -> Process:
    """Start the steady producer (`isrwatch.lab.load`): `rate` records/s round-robin over every partition of
    `topics` (default: the lab's), recorded in `lab` so that `down` stops it. Save `lab` afterwards."""
    if alive(lab.producer):
        raise LabError(f"the lab's producer runs already (pid {lab.producer.pid})")
    lab.producer = Process(
        log=str(Path(lab.dir) / "producer.log"),
        argv=[
            sys.executable,
            "-m",
            "isrwatch.lab.load",
            "--bootstrap",
            lab.bootstrap_servers,
            "--topics",
            ",".join(f"{t}:{n}" for t, n in (topics or lab.topics).items()),
            "--rate",
            str(rate),
        ],
    )
    launch(lab.producer)
    lab.producer_rate = rate
    return lab.producer


def run_tool(argv: list[str], progress: Progress, timeout: float = 600, release: str = ZOOKEEPER_RELEASE) -> str:
    """Run a Kafka tool class (kafka-tools, e.g. `org.apache.kafka.tools.ProducerPerformance`) on a release's
    classpath (the lab's: `lab.kafka_version`); returns its stdout, or a LabError with the end of its stderr."""
    try:
        classpath = str(ensure(kafka_set(release), progress)[0].parent / "*")
    except JarsError as exc:
        raise LabError(str(exc)) from None
    try:
        done = subprocess.run(
            [_java(), "-Xmx256m", *JVM_FLAGS, "-cp", classpath, *argv], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        raise LabError(f"{argv[0]}: still running after {timeout:g} s (stopped)") from None
    if done.returncode != 0:
        raise LabError(f"{argv[0]} failed (exit {done.returncode}):\n{tail_text(done.stderr)}")
    return done.stdout


def _wait_for_load(lab: Lab, timeout: float) -> None:
    """Until the producer's records reached every lab partition. Before that a leader's LEO stands still, and
    Kafka never expires a follower at the leader's LEO (KAFKA-7152): a fault right after `up` would shrink
    nothing there."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=lab.bootstrap_servers.split(","), client_id="isrwatch-lab")
    try:
        partitions = [TopicPartition(t, p) for t, n in lab.topics.items() for p in range(n)]

        def loaded() -> bool:
            try:
                return all(offset > 0 for offset in consumer.end_offsets(partitions).values())
            except KeyError:  # the client's metadata lacks a partition created a moment ago: ask again
                return False

        wait_until("the producer's records in every partition", loaded, timeout)
    finally:
        consumer.close()


def _launch_nodes(lab: Lab, spec: LabSpec, progress: Progress, what: str) -> None:
    """Say what starts (with the agent, if any), start every broker and the monitor, and record their pids."""
    progress(what + (f", agent {Path(spec.agent).name}" if spec.agent else ""))
    for broker in [*lab.brokers, lab.monitor]:
        launch(broker)
    save(lab)


def _start_zookeeper_mode(lab: Lab, spec: LabSpec, progress: Progress) -> None:
    """ZooKeeper, then the brokers and the monitor, until they registered and a controller was elected."""
    progress(f"starting ZooKeeper on {lab.zookeeper}")
    launch(cast(Process, lab.zookeeper_process))
    save(lab)
    zk = _connect(lab, timeout=60)
    try:
        for chroot in (CHROOT, MONITOR_CHROOT):
            zk.ensure_path(chroot)
        _launch_nodes(
            lab,
            spec,
            progress,
            f"starting brokers {', '.join(str(b.id) for b in lab.brokers)} (Kafka {lab.kafka_version}, ZooKeeper "
            f"mode, inter.broker.protocol.version={lab.inter_broker_protocol_version}, replica.lag.time.max.ms="
            f"{spec.lag_ms}) and the monitor broker {MONITOR_ID}",
        )
        took = _wait_registered(lab, zk, spec.start_timeout_s)
        progress(f"brokers registered in ZooKeeper after {took:.1f} s")
        wait_until("electing a controller", lambda: controller(zk)[0] is not None, 60)
    finally:
        zk.stop()
        zk.close()


def _format_kraft(lab: Lab, java: str, classpath: str) -> None:
    """Format every node's log directory (StorageTool, all at once): the monitored nodes for the lab's cluster id,
    the monitor for a cluster of its own."""
    config = Path(lab.dir) / "config" / "tools-log4j2.xml"
    config.write_text(kraft.TOOLS_LOG4J2)
    tool = [java, "-Xmx256m", *JVM_FLAGS, f"-Dlog4j2.configurationFile={config}", "-cp", classpath]
    runs = [
        (node, subprocess.Popen([*tool, *kraft.format_argv(Path(node.config), cluster)], stdout=PIPE, stderr=STDOUT))
        for node, cluster in [*((b, str(lab.cluster_id)) for b in lab.brokers), (lab.monitor, kraft.cluster_id())]
    ]
    failed = []
    for node, run in runs:
        out = run.communicate(timeout=120)[0].decode(errors="replace")
        if run.returncode != 0:
            failed.append(f"node {node.id}: StorageTool format failed (exit {run.returncode}):\n{tail_text(out)}")
    if failed:
        raise LabError("\n".join(failed))


def _start_kraft(lab: Lab, spec: LabSpec, java: str, classpath: str, progress: Progress) -> None:
    """Format the nodes, start them and the monitor, until every broker registered unfenced with the quorum."""
    progress(
        f"formatting nodes {', '.join(str(b.id) for b in lab.brokers)} and the monitor {MONITOR_ID} (Kafka "
        f"{lab.kafka_version}, KRaft, cluster id {lab.cluster_id}, eligible.leader.replicas.version="
        f"{kraft.ELIGIBLE_LEADER_REPLICAS_VERSION})"
    )
    _format_kraft(lab, java, classpath)
    _launch_nodes(
        lab,
        spec,
        progress,
        f"starting combined broker+controller nodes {', '.join(str(b.id) for b in lab.brokers)} (quorum "
        f"{lab.controller_quorum}, broker.session.timeout.ms={lab.broker_session_timeout_ms}, "
        f"replica.lag.time.max.ms={spec.lag_ms}) and the monitor {MONITOR_ID} (a one-node KRaft cluster)",
    )
    expected = {b.id: False for b in lab.brokers}

    def registered() -> bool:
        if not all(_listening(b.port) for b in [*lab.brokers, lab.monitor]):  # a KRaft broker listens once unfenced
            return False
        try:
            return registrations(lab) == expected and kraft.describe_brokers(lab.monitor_bootstrap, MONITOR_ID, 1) == {
                MONITOR_ID: False
            }
        except (LabError, kraft.Unanswered):
            return False

    def failed() -> str | None:
        dead = [b for b in [*lab.brokers, lab.monitor] if not alive(b)]
        return "\n".join(f"node {b.id} exited during start-up; its last log lines:\n{broker_logs(b)}" for b in dead)

    try:
        took = wait_until("starting the nodes", registered, spec.start_timeout_s, 0.5, failed)
    except LabError as exc:
        if "not after" not in str(exc):
            raise
        raise LabError(
            f"{exc}; the nodes' last log lines:\n"
            + "\n".join(f"node {b.id}:\n{broker_logs(b)}" for b in [*lab.brokers, lab.monitor])
        ) from None
    lab.features = kraft.finalized_features(*lab.answering())
    progress(f"brokers registered with the quorum and unfenced after {took:.1f} s; features {lab.features}")


def up(directory: Path, spec: LabSpec, progress: Progress) -> Lab:
    """Start a lab in `directory` and return its record; on failure nothing it started is left running."""
    spec.check()
    directory = Path(directory).resolve()
    _clear(directory)
    started = time.monotonic()
    try:
        classpath = str(ensure(kafka_set(spec.release()), progress)[0].parent / "*")
    except JarsError as exc:
        raise LabError(str(exc)) from None
    java = _java()
    lab = _plan(directory, spec, java, classpath)
    lab.started_ms = int(time.time() * 1000)
    try:
        if lab.mode == KRAFT:
            _start_kraft(lab, spec, java, classpath, progress)
        else:
            _start_zookeeper_mode(lab, spec, progress)
        # A broker registers before its listener accepts connections.
        wait_until(
            "the brokers' listeners",
            lambda: all(_listening(b.port) for b in [*lab.brokers, lab.monitor]),
            60,
            failed=lambda: next((f"broker {b.id} exited" for b in [*lab.brokers, lab.monitor] if not alive(b)), None),
        )
        progress(
            "creating topics "
            + ", ".join(f"{t} ({n} partitions, RF {lab.replication_factor})" for t, n in lab.topics.items())
        )
        _create_topics(lab.bootstrap_servers, lab.topics, lab.replication_factor, spec.start_timeout_s)
        _create_topics(lab.monitor_bootstrap, MONITOR_TOPICS, 1, configs=MONITOR_TOPIC_CONFIGS)
        wait_until("topics getting their leaders and full ISRs", lambda: isr_full(lab), spec.start_timeout_s)
        if spec.rate:
            start_producer(lab, spec.rate)
            _wait_for_load(lab, spec.start_timeout_s)
        save(lab)
    except BaseException as exc:  # failed or interrupted: leave nothing running
        stop_all(lab)
        save(lab)
        if isinstance(exc, LabError) or not isinstance(exc, Exception):
            raise
        # A client error while the cluster starts: say it with the brokers' own words.
        raise LabError(
            f"starting the lab: {type(exc).__name__}: {exc}; the brokers' last log lines:\n"
            + "\n".join(f"broker {b.id}:\n{broker_logs(b)}" for b in [*lab.brokers, lab.monitor])
        ) from exc
    where = f"ZooKeeper {lab.zookeeper_connect}" if lab.mode == ZOOKEEPER else f"controllers {lab.controller_bootstrap}"
    progress(
        f"lab up in {time.monotonic() - started:.1f} s ({lab.mode}, Kafka {lab.kafka_version}): bootstrap "
        f"{lab.bootstrap_servers}, monitor {lab.monitor_bootstrap}, {where}; {directory / LAB_JSON}"
    )
    return lab


def _connect(lab: Lab, timeout: float) -> KazooClient:
    """A kazoo client on the lab's ZooKeeper once it answers (fails early if ZooKeeper exited)."""
    deadline = time.monotonic() + timeout
    while True:
        if not alive(lab.zookeeper_process):
            raise LabError(
                f"ZooKeeper exited during start-up; its last log lines:\n"
                f"{tail(Path(lab.dir) / 'zookeeper' / 'zookeeper.log')}\n{tail(lab.zookeeper_process.log)}"
            )
        client = _kazoo(lab.zookeeper, 5)
        try:
            client.start(timeout=2)
            return client
        except Exception:
            client.close()
            if time.monotonic() > deadline:
                raise LabError(f"ZooKeeper did not answer on {lab.zookeeper} within {timeout:g} s") from None
            time.sleep(0.2)


def stop_all(lab: Lab, graceful_s: float = 0.0) -> list[str]:
    """Stop every process of the lab (fault helpers first, then the producer, brokers and ZooKeeper).

    With `graceful_s`, the monitored brokers first get SIGTERM and that long to shut down the way Kafka does
    (controlled shutdown; an agent drains its events to the still running monitor broker); SIGKILL ends the rest.
    """
    stopped = []
    for fault in lab.faults:
        if send(fault.helper, signal.SIGKILL):
            stopped.append(f"{fault.kind} helper (pid {fault.helper.pid})")
    wait_gone([f.helper for f in lab.faults], 5)
    lab.faults = []
    if send(lab.producer, signal.SIGTERM):
        stopped.append(f"producer (pid {lab.producer.pid})")
        for p in wait_gone([lab.producer], 5):
            send(p, signal.SIGKILL)
    if graceful_s > 0:
        for broker in lab.brokers:
            send(broker, signal.SIGCONT)
            if send(broker, signal.SIGTERM):
                stopped.append(f"broker {broker.id} (pid {broker.pid}, SIGTERM)")
        wait_gone(list(lab.brokers), graceful_s)
    for broker in [*lab.brokers, lab.monitor]:
        send(broker, signal.SIGCONT)  # a stalled broker must not stay stopped
        if send(broker, signal.SIGKILL):
            stopped.append(f"broker {broker.id} (pid {broker.pid})")
    if send(lab.zookeeper_process, signal.SIGKILL):
        stopped.append(f"ZooKeeper (pid {lab.zookeeper_process.pid})")
    left = wait_gone(lab.processes(), 20)
    if left:
        raise LabError("still running after SIGKILL: " + ", ".join(str(p.pid) for p in left))
    return stopped


def down(directory: Path, progress: Progress, graceful_s: float = 0.0) -> None:
    """Stop everything the lab in `directory` runs and wait until its ports are free; data and logs stay."""
    directory = Path(directory).resolve()
    with editing(directory) as lab:
        if graceful_s > 0:
            ids = ", ".join(str(b.id) for b in lab.brokers)
            progress(f"stopping brokers {ids} with SIGTERM (controlled shutdown, up to {graceful_s:g} s)")
        stopped = stop_all(lab, graceful_s)
        nodes = [*lab.brokers, lab.monitor]
        ports = [b.port for b in nodes] + [b.controller_port for b in nodes if b.controller_port is not None]
        ports += [int(lab.zookeeper.rsplit(":", 1)[1])] if lab.zookeeper else []
        try:
            wait_until("freeing the lab's ports", lambda: all(_port_free(p) for p in ports), 20)
        except LabError as exc:
            progress(f"warning: {exc}")
    progress(("stopped " + ", ".join(stopped)) if stopped else "nothing was running")
    progress(f"logs and data stay in {directory}")
