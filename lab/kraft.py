"""KRaft mode for the lab (Kafka 4.x): the nodes' configs, the storage format, and the cluster's truth from Kafka's
admin API (DescribeTopicPartitions, DescribeMetadataQuorum, DescribeCluster), as kafka-python's admin client asks it.

Every monitored node is a combined broker and controller (`process.roles=broker,controller`) of one static quorum
(`controller.quorum.voters`): three JVMs instead of six on a 2-core machine, and a stall or kill of the active
controller also takes down a broker, as it does in the clusters people run combined.

Timeouts. A stall and a fence must be different faults. The controller fences a broker whose last heartbeat is
`broker.session.timeout.ms` old (it then moves its leaderships and removes it from every ISR); a leader drops a
follower `replica.lag.time.max.ms` after it last caught up. The lab sets the session to 18 s (the ZooKeeper lab's
`zookeeper.session.timeout.ms`), heartbeats every 2 s (Kafka's default): a stall of up to 14 s (the session less two
heartbeats, as the last heartbeat may be that old when the stall starts) is only the leaders' shrink after the lag;
a fence lasts at least 20 s (the session plus one heartbeat), so the controller surely fences the broker.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BROKER_SESSION_TIMEOUT_MS = 18_000  # broker.session.timeout.ms (Kafka's default is 9000)
BROKER_HEARTBEAT_INTERVAL_MS = 2_000  # broker.heartbeat.interval.ms (Kafka's default)
# KIP-966's eligible leader replicas, set at format (`--feature`), not left to the release's default: 1 (on) is what
# a new 4.4.0 cluster gets anyway (`StorageTool version-mapping --release-version 4.4` says
# eligible.leader.replicas.version=1), and the lab's truth (DescribeTopicPartitions) then reports ELR and
# last-known ELR as the brokers people run do. Set explicitly, so every 4.x release the lab runs has it: 4.0.x
# defaults to 0 (`version-mapping --release-version 4.0`: eligible.leader.replicas.version=0) and accepts 1.
ELIGIBLE_LEADER_REPLICAS_VERSION = 1
METADATA_TOPIC = "__cluster_metadata"
CONTROLLER_LISTENER = "CONTROLLER"

LOG4J2 = """<?xml version="1.0" encoding="UTF-8"?>
<!-- Kafka's log layout in plain files: server.log, state-change.log (the brokers' metadata-path leader and follower
     changes), controller.log (the quorum controller; ReplicationControlManager at DEBUG: every ISR change it
     commits, with its partition epoch), scheduler.log (the real isr-expiration run times). -->
<Configuration status="WARN">
  <Properties><Property name="pattern">[%d{yyyy-MM-dd HH:mm:ss,SSS}] %p %m (%c)%n</Property></Properties>
  <Appenders>
    <File name="server" fileName="${sys:kafka.logs.dir}/server.log"><PatternLayout pattern="${pattern}"/></File>
    <File name="stateChange" fileName="${sys:kafka.logs.dir}/state-change.log">
      <PatternLayout pattern="${pattern}"/></File>
    <File name="controller" fileName="${sys:kafka.logs.dir}/controller.log"><PatternLayout pattern="${pattern}"/></File>
    <File name="scheduler" fileName="${sys:kafka.logs.dir}/scheduler.log"><PatternLayout pattern="${pattern}"/></File>
  </Appenders>
  <Loggers>
    <Root level="INFO"><AppenderRef ref="server"/></Root>
    <!-- DEBUG, but only the ISR proposals and the ignored responses pass (the rest is per-fetch noise). -->
    <Logger name="kafka.cluster.Partition" level="DEBUG" additivity="false">
      <Filters>
        <ThresholdFilter level="INFO" onMatch="ACCEPT" onMismatch="NEUTRAL"/>
        <RegexFilter regex=".*(Submitting ISR state change|alter partition request|Ignoring).*" onMatch="ACCEPT"
                     onMismatch="DENY"/>
      </Filters>
      <AppenderRef ref="server"/>
    </Logger>
    <Logger name="org.apache.kafka.controller" level="INFO" additivity="false"><AppenderRef ref="controller"/></Logger>
    <Logger name="org.apache.kafka.controller.ReplicationControlManager" level="DEBUG" additivity="false">
      <AppenderRef ref="controller"/></Logger>
    <Logger name="state.change.logger" level="INFO" additivity="false"><AppenderRef ref="stateChange"/></Logger>
    <Logger name="org.apache.kafka.server.util.KafkaScheduler" level="TRACE" additivity="false">
      <RegexFilter regex=".*isr-expiration.*" onMatch="ACCEPT" onMismatch="DENY"/><AppenderRef ref="scheduler"/>
    </Logger>
  </Loggers>
</Configuration>
"""

# Tools (StorageTool): warnings to stderr only.
TOOLS_LOG4J2 = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders><Console name="stderr" target="SYSTEM_ERR"><PatternLayout pattern="%p %m%n"/></Console></Appenders>
  <Loggers><Root level="WARN"><AppenderRef ref="stderr"/></Root></Loggers>
</Configuration>
"""


def cluster_id() -> str:
    """A new cluster id as Kafka's `Uuid.randomUuid()` makes it (URL-safe base64, never starting with '-', which
    the command line would take for an option), without starting a JVM for `StorageTool random-uuid`."""
    while True:
        value = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not value.startswith("-"):
            return value


def voters(nodes: list[tuple[int, int]]) -> str:
    """`controller.quorum.voters` of a static quorum: [(node id, controller port)] -> `1@127.0.0.1:PORT,...`."""
    return ",".join(f"{node}@127.0.0.1:{port}" for node, port in nodes)


def node_config(node_id: int, port: int, controller_port: int, quorum: str) -> dict[str, Any]:
    """The KRaft part of a combined node's server.properties (the replication settings are the lab's, both modes)."""
    return {
        "process.roles": "broker,controller",
        "node.id": node_id,
        "controller.quorum.voters": quorum,
        "listeners": f"PLAINTEXT://127.0.0.1:{port},{CONTROLLER_LISTENER}://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": CONTROLLER_LISTENER,
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": f"{CONTROLLER_LISTENER}:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "broker.session.timeout.ms": BROKER_SESSION_TIMEOUT_MS,
        "broker.heartbeat.interval.ms": BROKER_HEARTBEAT_INTERVAL_MS,
    }


def format_argv(config: Path, cluster: str) -> list[str]:
    """StorageTool's arguments that format a node's log directory for the cluster, ELR set explicitly."""
    return [
        "kafka.tools.StorageTool",
        "format",
        "--cluster-id",
        cluster,
        "--config",
        str(config),
        "--feature",
        f"eligible.leader.replicas.version={ELIGIBLE_LEADER_REPLICAS_VERSION}",
        "--ignore-formatted",
    ]


# -- partition epochs, from the metadata log ---------------------------------------------------------------------


def dump_log_segments(release: str) -> str:
    """Kafka's DumpLogSegments tool class in a release: in core (`kafka.tools`) up to 4.2, in kafka-tools
    (`org.apache.kafka.tools`) from 4.3 on, when core dropped it."""
    major, minor = (int(n) for n in release.split(".")[:2])
    return "kafka.tools.DumpLogSegments" if (major, minor) < (4, 3) else "org.apache.kafka.tools.DumpLogSegments"


def partition_epochs(dump: str) -> dict[tuple[str, int], int]:
    """Every partition's epoch from `DumpLogSegments --cluster-metadata-decoder` output of the metadata log: its
    PARTITION_RECORD's partitionEpoch, plus one per PARTITION_CHANGE_RECORD after it (the controller's replay,
    PartitionRegistration.merge, returns `partitionEpoch + 1` for every change record). No admin API reports the
    partition epoch; this is the only place outside the controller's memory."""
    names: dict[str, str] = {}
    epochs: dict[tuple[str, int], int] = {}
    for line in dump.splitlines():
        _, found, payload = line.partition(" payload: ")
        if not found or not payload.startswith("{"):
            continue
        record = json.loads(payload)
        data = record.get("data", {})
        if record.get("type") == "TOPIC_RECORD":
            names[data["topicId"]] = data["name"]
        elif record.get("type") == "PARTITION_RECORD":
            epochs[(data["topicId"], data["partitionId"])] = data["partitionEpoch"]
        elif record.get("type") == "PARTITION_CHANGE_RECORD" and (data["topicId"], data["partitionId"]) in epochs:
            epochs[(data["topicId"], data["partitionId"])] += 1
    return {(names[topic_id], p): epoch for (topic_id, p), epoch in epochs.items() if topic_id in names}


# -- broker registrations, from the broker's own log --------------------------------------------------------------

# BrokerLifecycleManager's line once the controller answered its BrokerRegistration: no admin API reports a broker
# epoch (DescribeCluster has none), and a restarted node's new epoch is what tells its new incarnation from the old
# registration that the controller keeps, unfenced, until the new one replaces it.
REGISTERED = re.compile(r"Successfully registered broker (\d+) with broker epoch (\d+)")


def broker_epochs(server_log: Path, node_id: int, offset: int = 0) -> tuple[list[int], int]:
    """The broker epochs of the node's registrations its server.log (appended across restarts) holds from byte
    `offset` on, oldest first, and the offset to read on from."""
    try:
        with server_log.open("rb") as log:
            log.seek(offset)
            text = log.read()
    except FileNotFoundError:
        return [], offset
    # A line still being written is read again next time: only whole lines count.
    whole = text[: text.rfind(b"\n") + 1]
    epochs = [int(m[2]) for m in REGISTERED.finditer(whole.decode(errors="replace")) if int(m[1]) == node_id]
    return epochs, offset + len(whole)


# -- the truth, from the admin API --------------------------------------------------------------------------------


class Unanswered(RuntimeError):
    """No broker answered the admin request (all stopped, or the cluster is still starting)."""


@contextlib.contextmanager
def admin(bootstrap: str, timeout_ms: int = 3000) -> Iterator[Any]:
    """A kafka-python admin client on `bootstrap` (give only brokers that answer: a paused one accepts connections
    but never replies), with a short request timeout so that a request that lands on a paused broker anyway is
    retried (`ask`) instead of waited for."""
    from kafka.admin import KafkaAdminClient

    client = KafkaAdminClient(
        bootstrap_servers=bootstrap.split(","),
        client_id="isrwatch-lab",
        request_timeout_ms=timeout_ms,
        bootstrap_timeout_ms=timeout_ms,
    )
    try:
        yield client
    finally:
        client.close()


def ask(bootstrap: str, via: int | None, question: str, call: Any, tries: int = 5) -> Any:
    """`call(client)` on a fresh admin client, again after a failure (a node that just left); Unanswered after
    `tries`. The client first connects to broker `via`: it sends a request without a destination to a connected idle
    node before any other, so none goes to a paused or killed broker that the cluster still lists (the controller
    lists it until it fences it)."""
    from kafka.errors import KafkaError

    last: Exception | None = None
    for _ in range(tries):
        try:
            with admin(bootstrap) as client:
                if via is not None:
                    client.get_broker_version_data(via)
                return call(client)
        except (KafkaError, OSError) as exc:
            last = exc
            time.sleep(0.2)
    raise Unanswered(f"{question} on {bootstrap}: {type(last).__name__}: {last}")


def describe_partitions(bootstrap: str, via: int | None, topics: list[str]) -> list[dict[str, Any]]:
    """Every partition of the topics that exist, as kafka-python's dict with its `topic` added
    (DescribeTopicPartitions, the API the Java admin's describeTopics uses on KRaft brokers; it carries the ELR,
    `eligible_leader_replicas` and `last_known_elr`, that Metadata lacks)."""

    def call(client: Any) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        cursor = None
        while True:
            answer = client.describe_topic_partitions(topics, cursor=cursor)
            for t in answer["topics"]:
                if t["error_code"]:  # UNKNOWN_TOPIC_OR_PARTITION: not created yet
                    continue
                found += [{**p, "topic": t["name"]} for p in t["partitions"] if not p["error_code"]]
            cursor = answer["next_cursor"]
            if cursor is None:
                return found

    return ask(bootstrap, via, "DescribeTopicPartitions", call)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Quorum:
    """The metadata quorum as DescribeMetadataQuorum reports it: its leader is the active controller."""

    leader: int  # -1 while there is none
    leader_epoch: int
    high_watermark: int
    voters: tuple[int, ...]
    observers: tuple[int, ...]


def describe_quorum(bootstrap: str, via: int | None) -> Quorum:
    """The metadata quorum (DescribeMetadataQuorum, which a broker forwards to the active controller)."""

    def call(client: Any) -> Quorum:
        [partition] = client.describe_metadata_quorum()["topics"][0]["partitions"]
        if partition.get("error"):
            raise ValueError(partition["error"])
        return Quorum(
            partition["leader_id"],
            partition["leader_epoch"],
            partition["high_watermark"],
            tuple(sorted(v["replica_id"] for v in partition["current_voters"])),
            tuple(sorted(v["replica_id"] for v in partition["observers"])),
        )

    return ask(bootstrap, via, "DescribeMetadataQuorum", call)  # type: ignore[no-any-return]


def describe_brokers(bootstrap: str, via: int | None, tries: int = 5) -> dict[int, bool]:
    """Every registered broker and whether the controller has fenced it (DescribeCluster with fenced brokers)."""

    def call(client: Any) -> dict[int, bool]:
        return {b["broker_id"]: bool(b.get("is_fenced")) for b in client.describe_cluster()["brokers"]}

    return ask(bootstrap, via, "DescribeCluster", call, tries)  # type: ignore[no-any-return]


def finalized_features(bootstrap: str, via: int | None) -> dict[str, int]:
    """The cluster's finalized feature levels (metadata.version, eligible.leader.replicas.version, ...)."""

    def call(client: Any) -> dict[str, int]:
        features = client.describe_features()
        return {name: f["finalized"][1] for name, f in sorted(features.items()) if "finalized" in f}

    return ask(bootstrap, via, "ApiVersions (features)", call)  # type: ignore[no-any-return]
