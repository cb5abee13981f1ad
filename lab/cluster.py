"""The lab cluster: N Kafka brokers, a monitor broker and a steady producer, in one of two modes.

- ZooKeeper mode (`--kafka 3.9`, the default): ZooKeeper and N Kafka 3.9.2 brokers. With
  `inter.broker.protocol.version=2.6` (the default) ISR changes go through ZooKeeper and are propagated the
  ZooKeeper-era way isrwatch models (2.5 s checks, 5 s linger, 60 s max delay); with `--ibp 3.9` leaders send
  AlterPartition to the controller. The monitor broker (id 100) is a one-broker cluster of its own under
  another ZooKeeper chroot.
- KRaft mode (`--kafka 4.x`): N combined broker+controller nodes of one static quorum (lab/kraft.py), and
  the monitor a one-node KRaft cluster of its own, same release.

Faults never touch the monitor, so isrwatch's own traffic (`isrwatch.events`, output topics) survives them.
Everything lives under one directory: configs, data, logs, and `lab.json` (`record`), the record every command
(and every detached fault helper) reads and updates under a file lock.

This module starts a lab (`up`) and stops it (`down`); what it starts and the files it writes are `config`'s,
starting the nodes of either mode `startup`'s, the cluster's truth (ZooKeeper's znodes, or Kafka's admin API)
`truth`'s.
"""

from __future__ import annotations

import shutil
import signal
import sys
import time
from pathlib import Path

from isrwatch.processes.detached import Process, alive, launch, send, wait_gone

from .config import MONITOR_TOPIC_CONFIGS, MONITOR_TOPICS, LabSpec, find_java, plan
from .jars import JarsError, Progress, ensure, kafka_set
from .ports import listening, port_free
from .record import KRAFT, LAB_JSON, ZOOKEEPER, Lab, LabError, editing, load, save
from .startup import broker_logs, start_kraft, start_zookeeper_mode
from .truth import isr_full, wait_until


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
    java = find_java()
    lab = plan(directory, spec, java, classpath)
    lab.started_ms = int(time.time() * 1000)
    try:
        if lab.mode == KRAFT:
            start_kraft(lab, spec, java, classpath, progress)
        else:
            start_zookeeper_mode(lab, spec, progress)
        # A broker registers before its listener accepts connections.
        wait_until(
            "the brokers' listeners",
            lambda: all(listening(b.port) for b in [*lab.brokers, lab.monitor]),
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
            wait_until("freeing the lab's ports", lambda: all(port_free(p) for p in ports), 20)
        except LabError as exc:
            progress(f"warning: {exc}")
    progress(("stopped " + ", ".join(stopped)) if stopped else "nothing was running")
    progress(f"logs and data stay in {directory}")
