"""lab.json, the lab's record: what runs (its processes, by pid and start time), where, and how it was set up.
Every command, and every detached fault helper, reads it and updates it under a file lock (`editing`)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from isrwatch.processes.detached import Process, alive, paused

from .jars import ZOOKEEPER_RELEASE
from .ports import listening

LAB_JSON = "lab.json"
CHROOT = "/lab"
MONITOR_CHROOT = "/monitor"
MONITOR_ID = 100
CLUSTER_NAME = "lab"
EVENTS_TOPIC = "isrwatch.events"
ZOOKEEPER, KRAFT = "zookeeper", "kraft"  # the lab's modes


class LabError(RuntimeError):
    """The lab cannot do what was asked; the message says why (with the last log lines of a failed start)."""


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
        answering = [b for b in self.brokers if alive(b) and not paused(b) and listening(b.port)]
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
    if not Path(directory).is_dir():
        raise LabError(f"--dir {directory}: no lab there (no such directory; start one: isrwatch lab up)")
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
