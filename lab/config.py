"""What `isrwatch lab up` starts (`LabSpec`) and how: the JVMs' settings, every node's configuration files
(`plan`, the lab's record before any process starts), the agent's argument, and Kafka's tools on a release's
classpath (`run_tool`)."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from isrwatch.processes.detached import Process, tail_text

from . import kraft
from .jars import KAFKA_NEWEST, ZOOKEEPER_RELEASE, JarsError, Progress, default_agent, ensure, kafka_release, kafka_set
from .ports import free_ports
from .record import (
    CHROOT,
    CLUSTER_NAME,
    EVENTS_TOPIC,
    KRAFT,
    MONITOR_CHROOT,
    MONITOR_ID,
    ZOOKEEPER,
    Broker,
    Lab,
    LabError,
)

# isrwatch's own traffic, on the monitor broker: the agent's events and `isrwatch run --kafka-output`'s topics.
MONITOR_TOPICS = {
    EVENTS_TOPIC: 3,
    "isrwatch.decisions": 3,
    "isrwatch.propagations": 3,
    "isrwatch.alter-partitions": 3,
    "isrwatch.incidents": 3,
}
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


def find_java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home and (Path(home) / "bin" / "java").exists() else shutil.which("java")
    if not java:
        raise LabError("java is not installed (Kafka needs Java 17): run `bash scripts/provision.sh`")
    return java


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


def plan(directory: Path, spec: LabSpec, java: str, classpath: str) -> Lab:
    """Write every config file and describe the lab to start (no process yet)."""
    config_dir = directory / "config"
    config_dir.mkdir(parents=True, exist_ok=True)
    mode = spec.mode()
    if mode == KRAFT:
        log_config = config_dir / "log4j2.xml"
        log_config.write_text(kraft.LOG4J2)
        log_flag = f"-Dlog4j2.configurationFile={log_config}"
        # The monitored nodes' and the monitor's PLAINTEXT and CONTROLLER ports.
        monitor_port, monitor_controller, *rest = free_ports(2 * (spec.brokers + 1))
        ports, controller_ports = rest[: spec.brokers], rest[spec.brokers :]
    else:
        log_config = config_dir / "log4j.properties"
        log_config.write_text(LOG4J)
        log_flag = f"-Dlog4j.configuration={log_config.as_uri()}"
        zk_port, monitor_port, *ports = free_ports(2 + spec.brokers)
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


def run_tool(argv: list[str], progress: Progress, timeout: float = 600, release: str = ZOOKEEPER_RELEASE) -> str:
    """Run a Kafka tool class (kafka-tools, e.g. `org.apache.kafka.tools.ProducerPerformance`) on a release's
    classpath (the lab's: `lab.kafka_version`); returns its stdout, or a LabError with the end of its stderr."""
    try:
        classpath = str(ensure(kafka_set(release), progress)[0].parent / "*")
    except JarsError as exc:
        raise LabError(str(exc)) from None
    try:
        done = subprocess.run(
            [find_java(), "-Xmx256m", *JVM_FLAGS, "-cp", classpath, *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise LabError(f"{argv[0]}: still running after {timeout:g} s (stopped)") from None
    if done.returncode != 0:
        raise LabError(f"{argv[0]} failed (exit {done.returncode}):\n{tail_text(done.stderr)}")
    return done.stdout
