"""Real Kafka 3.9.2 brokers (ZooKeeper mode, IBP 2.6) on loopback, for the agent's benchmark and recordings.

A minimal harness: Maven provisions the broker jars into `.tools/jars/kafka-agent-bench/` (cache under `.tools/m2`),
ZooKeeper and each broker run as their own JVM on free ports, and faults are real signals. When `isrwatch lab`
(issue #12's lab fixture) is merged, the agent benchmark should move onto it.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JARS = ROOT / ".tools" / "jars" / "kafka-agent-bench"
M2 = ROOT / ".tools" / "m2"
AGENT_JAR = ROOT / "agent" / "target" / "isrwatch-agent.jar"
KAFKA_VERSION = "3.9.2"

_POM = f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>isrwatch</groupId><artifactId>kafka-agent-bench</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId>
      <version>{KAFKA_VERSION}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId>
      <version>{KAFKA_VERSION}</version></dependency>
    <dependency><groupId>ch.qos.reload4j</groupId><artifactId>reload4j</artifactId><version>1.2.25</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-reload4j</artifactId><version>1.7.36</version></dependency>
  </dependencies>
</project>
"""

_LOG4J = """log4j.rootLogger=INFO, server
log4j.appender.server=org.apache.log4j.FileAppender
log4j.appender.server.File=${kafka.logs.dir}/server.log
log4j.appender.server.layout=org.apache.log4j.PatternLayout
log4j.appender.server.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.appender.stateChange=org.apache.log4j.FileAppender
log4j.appender.stateChange.File=${kafka.logs.dir}/state-change.log
log4j.appender.stateChange.layout=org.apache.log4j.PatternLayout
log4j.appender.stateChange.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.appender.controller=org.apache.log4j.FileAppender
log4j.appender.controller.File=${kafka.logs.dir}/controller.log
log4j.appender.controller.layout=org.apache.log4j.PatternLayout
log4j.appender.controller.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.org.apache.zookeeper=WARN
log4j.logger.kafka.request.logger=WARN
log4j.logger.kafka.controller=INFO, controller
log4j.additivity.kafka.controller=false
log4j.logger.state.change.logger=INFO, stateChange
log4j.additivity.state.change.logger=false
"""


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def provision_jars() -> Path:
    """The broker's runtime jars (Kafka, kafka-tools, reload4j), fetched once with Maven."""
    marker = JARS / f".complete-{KAFKA_VERSION}"
    if marker.exists():
        return JARS
    log(f"fetching Kafka {KAFKA_VERSION} jars with Maven into {JARS}")
    JARS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "pom.xml").write_text(_POM)
        subprocess.run(
            [
                "mvn",
                "-q",
                "-B",
                f"-Dmaven.repo.local={M2}",
                "dependency:copy-dependencies",
                f"-DoutputDirectory={JARS}",
            ],
            cwd=tmp,
            check=True,
        )
    marker.touch()
    return JARS


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the harness dies, so no JVM outlives it (Linux prctl)."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{what} did not listen on {port} within {timeout}s")


@dataclass
class Broker:
    id: int
    port: int
    dir: Path
    agent_args: str | None
    proc: subprocess.Popen | None = None

    @property
    def events(self) -> Path:
        return self.dir / "events.jsonl"

    @property
    def raw_events(self) -> Path:
        return self.dir / "raw.jsonl"

    def cpu_seconds(self) -> float:
        """User + system CPU of the broker JVM so far (from /proc)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Lab:
    """ZooKeeper and `brokers` Kafka brokers; use as a context manager (everything is stopped on exit)."""

    workdir: Path
    brokers: int = 3
    lag_ms: int = 6000
    agent_args: dict[int, str] = field(default_factory=dict)
    heap: str = "512m"
    extra_config: dict[str, str] = field(default_factory=dict)
    jars: Path = JARS
    zk_port: int = 0
    nodes: list[Broker] = field(default_factory=list)
    zk: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{b.port}" for b in self.nodes)

    def classpath(self) -> str:
        return str(self.jars / "*")

    def __enter__(self) -> Lab:
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "log4j.properties").write_text(_LOG4J)
        self.zk_port = free_port()
        zkdir = self.workdir / "zk"
        zkdir.mkdir(exist_ok=True)
        (zkdir / "zk.properties").write_text(
            f"dataDir={zkdir / 'data'}\nclientPort={self.zk_port}\nclientPortAddress=127.0.0.1\n"
            "admin.enableServer=false\nmaxClientCnxns=0\n"
        )
        self.zk = self._java(
            [
                "-Xmx256m",
                f"-Dkafka.logs.dir={zkdir}",
                "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                str(zkdir / "zk.properties"),
            ],
            zkdir / "stdout.log",
        )
        _wait_port(self.zk_port, self.zk, "ZooKeeper")
        for i in range(1, self.brokers + 1):
            b = Broker(i, free_port(), self.workdir / f"broker{i}", self.agent_args.get(i))
            b.dir.mkdir(exist_ok=True)
            self.nodes.append(b)
            self.start(b)
        for b in self.nodes:
            _wait_port(b.port, b.proc, f"broker {b.id}")
        return self

    def __exit__(self, *exc) -> None:
        for b in self.nodes:
            if b.proc and b.proc.poll() is None:
                b.proc.send_signal(signal.SIGCONT)
                b.proc.terminate()
        for b in self.nodes:
            if b.proc:
                try:
                    b.proc.wait(30)
                except subprocess.TimeoutExpired:
                    b.proc.kill()
                    b.proc.wait()
        if self.zk:
            self.zk.terminate()
            try:
                self.zk.wait(10)
            except subprocess.TimeoutExpired:
                self.zk.kill()
                self.zk.wait()

    def _java(self, args: list[str], out: Path) -> subprocess.Popen:
        with open(out, "ab") as f:
            return subprocess.Popen(
                ["java", "-cp", self.classpath(), *args],
                stdout=f,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )

    def start(self, b: Broker) -> None:
        """Starts (or restarts) one broker, with the agent when it has agent arguments."""
        props = {
            "broker.id": str(b.id),
            "listeners": f"PLAINTEXT://127.0.0.1:{b.port}",
            "log.dirs": str(b.dir / "data"),
            "zookeeper.connect": f"127.0.0.1:{self.zk_port}",
            "inter.broker.protocol.version": "2.6",
            "replica.lag.time.max.ms": str(self.lag_ms),
            "offsets.topic.replication.factor": str(min(3, self.brokers)),
            "offsets.topic.num.partitions": "3",
            "transaction.state.log.replication.factor": str(min(3, self.brokers)),
            "transaction.state.log.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "num.network.threads": "2",
            "num.io.threads": "4",
            "num.replica.fetchers": "1",
            "background.threads": "4",
            "auto.create.topics.enable": "false",
            "auto.leader.rebalance.enable": "false",
            "log.segment.bytes": str(64 * 1024 * 1024),
            "log.index.size.max.bytes": str(1024 * 1024),
            **self.extra_config,
        }
        path = b.dir / "broker.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        jvm = [
            f"-Xmx{self.heap}",
            f"-Xms{self.heap}",
            "-XX:+UseG1GC",
            f"-Dkafka.logs.dir={b.dir}",
            f"-Dlog4j.configuration=file:{self.workdir / 'log4j.properties'}",
        ]
        if b.agent_args is not None:
            jvm.append(f"-javaagent:{AGENT_JAR}={b.agent_args}")
        b.proc = self._java([*jvm, "kafka.Kafka", str(path)], b.dir / "stdout.log")

    def wait_started(self, b: Broker, timeout: float = 60) -> None:
        _wait_port(b.port, b.proc, f"broker {b.id}", timeout)

    def stop(self, b: Broker, sig: int = signal.SIGTERM) -> None:
        b.proc.send_signal(sig)
        b.proc.wait(60)

    def java_tool(self, args: list[str], timeout: float = 600) -> str:
        """Runs a Kafka tool class on the broker classpath; returns its stdout."""
        r = subprocess.run(
            ["java", "-Xmx256m", "-cp", self.classpath(), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            preexec_fn=_die_with_parent,
        )
        if r.returncode != 0:
            raise RuntimeError(f"{args[0]} failed ({r.returncode}): {r.stderr[-2000:]}")
        return r.stdout


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
