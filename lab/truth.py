"""The cluster's truth, in either mode: ZooKeeper's partition state znodes, registrations and controller in
ZooKeeper mode; Kafka's admin API (DescribeTopicPartitions, DescribeMetadataQuorum, DescribeCluster, lab/kraft.py)
in KRaft mode. `partitions`, `registrations` and `active_controller` answer in either."""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from isrwatch.processes.detached import alive

from . import kraft
from .config import run_tool
from .jars import Progress
from .record import CHROOT, ZOOKEEPER, Lab, LabError

if TYPE_CHECKING:
    from kazoo.client import KazooClient


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


# -- ZooKeeper's znodes ---------------------------------------------------------------------------------


def kazoo_client(hosts: str, timeout: float) -> KazooClient:
    """A kazoo client that logs nothing (the lab reports what matters itself)."""
    from kazoo.client import KazooClient

    quiet = logging.getLogger("isrwatch.lab.kazoo")
    quiet.setLevel(logging.CRITICAL)
    return KazooClient(hosts=hosts, timeout=timeout, logger=quiet)


@contextlib.contextmanager
def zookeeper(hosts: str, timeout: float = 10.0) -> Iterator[KazooClient]:
    """A started ZooKeeper client, stopped on exit."""
    client = kazoo_client(hosts, timeout)
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
