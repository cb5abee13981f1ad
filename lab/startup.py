"""Starting the lab's nodes, in either mode: ZooKeeper mode (ZooKeeper, then the brokers and the monitor, until
they registered and a controller was elected) and KRaft mode (format every node's storage, start the nodes, until
every broker registered unfenced with the quorum; the KRaft requests and configs are lab/kraft.py's)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from subprocess import PIPE, STDOUT
from typing import TYPE_CHECKING, cast

from isrwatch.processes.detached import Process, alive, launch, tail, tail_text

from . import kraft
from .config import JVM_FLAGS, LabSpec
from .jars import Progress
from .ports import listening
from .record import CHROOT, MONITOR_CHROOT, MONITOR_ID, Broker, Lab, LabError, save
from .truth import controller, kazoo_client, registered_brokers, registrations, wait_until

if TYPE_CHECKING:
    from kazoo.client import KazooClient


def broker_logs(broker: Broker, lines: int = 20) -> str:
    """The last lines of a broker's server.log and of its stdout (where a JVM that cannot start complains)."""
    return (
        f"  {broker.kafka_logs_dir}/server.log:\n{tail(Path(broker.kafka_logs_dir) / 'server.log', lines)}\n"
        f"  {broker.log}:\n{tail(broker.log, lines)}"
    )


def launch_nodes(lab: Lab, spec: LabSpec, progress: Progress, what: str) -> None:
    """Say what starts (with the agent, if any), start every broker and the monitor, and record their pids."""
    progress(what + (f", agent {Path(spec.agent).name}" if spec.agent else ""))
    for broker in [*lab.brokers, lab.monitor]:
        launch(broker)
    save(lab)


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


def _connect(lab: Lab, timeout: float) -> KazooClient:
    """A kazoo client on the lab's ZooKeeper once it answers (fails early if ZooKeeper exited)."""
    deadline = time.monotonic() + timeout
    while True:
        if not alive(lab.zookeeper_process):
            raise LabError(
                f"ZooKeeper exited during start-up; its last log lines:\n"
                f"{tail(Path(lab.dir) / 'zookeeper' / 'zookeeper.log')}\n{tail(lab.zookeeper_process.log)}"
            )
        client = kazoo_client(lab.zookeeper, 5)
        try:
            client.start(timeout=2)
            return client
        except Exception:
            client.close()
            if time.monotonic() > deadline:
                raise LabError(f"ZooKeeper did not answer on {lab.zookeeper} within {timeout:g} s") from None
            time.sleep(0.2)


def start_zookeeper_mode(lab: Lab, spec: LabSpec, progress: Progress) -> None:
    """ZooKeeper, then the brokers and the monitor, until they registered and a controller was elected."""
    progress(f"starting ZooKeeper on {lab.zookeeper}")
    launch(cast(Process, lab.zookeeper_process))
    save(lab)
    zk = _connect(lab, timeout=60)
    try:
        for chroot in (CHROOT, MONITOR_CHROOT):
            zk.ensure_path(chroot)
        launch_nodes(
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


def start_kraft(lab: Lab, spec: LabSpec, java: str, classpath: str, progress: Progress) -> None:
    """Format the nodes, start them and the monitor, until every broker registered unfenced with the quorum."""
    progress(
        f"formatting nodes {', '.join(str(b.id) for b in lab.brokers)} and the monitor {MONITOR_ID} (Kafka "
        f"{lab.kafka_version}, KRaft, cluster id {lab.cluster_id}, eligible.leader.replicas.version="
        f"{kraft.ELIGIBLE_LEADER_REPLICAS_VERSION})"
    )
    _format_kraft(lab, java, classpath)
    launch_nodes(
        lab,
        spec,
        progress,
        f"starting combined broker+controller nodes {', '.join(str(b.id) for b in lab.brokers)} (quorum "
        f"{lab.controller_quorum}, broker.session.timeout.ms={lab.broker_session_timeout_ms}, "
        f"replica.lag.time.max.ms={spec.lag_ms}) and the monitor {MONITOR_ID} (a one-node KRaft cluster)",
    )
    expected = {b.id: False for b in lab.brokers}

    def registered() -> bool:
        if not all(listening(b.port) for b in [*lab.brokers, lab.monitor]):  # a KRaft broker listens once unfenced
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
