"""The simulated cluster's shape: brokers, topics, timings, and the brokers' replica settings."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from isrwatch.state.config import Config, ConfigError
from isrwatch.state.events import DEFAULT_CLUSTER, TOPIC_MAX_LENGTH

_TOPIC = re.compile(rf"^[A-Za-z0-9._-]{{1,{TOPIC_MAX_LENGTH}}}$")


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    replication_factor: int

    @classmethod
    def parse(cls, text: str) -> TopicSpec:
        """`NAME:PARTITIONS:RF`, e.g. `orders:6:3`."""
        parts = text.split(":")
        if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
            raise ConfigError(f"--topic {text!r}: expected NAME:PARTITIONS:RF, e.g. orders:6:3")
        return cls(parts[0], int(parts[1]), int(parts[2]))


DEFAULT_TOPICS = (TopicSpec("orders", 6, 3), TopicSpec("payments", 3, 3), TopicSpec("clicks", 6, 2))


@dataclass(frozen=True)
class SimConfig:
    """The simulated cluster. `kafka` holds the brokers' replica settings: judge the output with the same."""

    brokers: int = 4  # broker ids 1..brokers; broker 1 is the first controller
    topics: tuple[TopicSpec, ...] = DEFAULT_TOPICS
    cluster: str = DEFAULT_CLUSTER
    start_ms: int = 0
    duration_ms: int | None = 120_000  # None: run forever
    kafka: Config = field(default_factory=Config)
    replica_fetch_wait_max_ms: int = 500
    fetch_rtt_ms: int = 5  # mean follower round trip when the leader has data for it
    append_interval_ms: int = 200  # mean time between two producer batches of one partition
    records_per_append: int = 20  # mean records per producer batch
    zookeeper_session_timeout_ms: int = 6000  # how long the controller takes to notice a crashed broker
    # With AlterPartition (kafka.isr_protocol): how long the controller takes to answer a leader's request.
    alter_partition_latency_ms: int = 20

    def __post_init__(self) -> None:
        if self.brokers < 1:
            raise ConfigError(f"brokers: must be >= 1, got {self.brokers}")
        if not self.topics:
            raise ConfigError("topics: at least one topic is needed")
        for t in self.topics:
            if not _TOPIC.match(t.name):
                raise ConfigError(f"topic {t.name!r}: 1-249 characters of [A-Za-z0-9._-]")
            if t.partitions < 1:
                raise ConfigError(f"topic {t.name}: partitions must be >= 1")
            if not 1 <= t.replication_factor <= self.brokers:
                raise ConfigError(f"topic {t.name}: replication factor must be 1..{self.brokers} (brokers)")
        if len({t.name for t in self.topics}) != len(self.topics):
            raise ConfigError("topics: names must be distinct")
        for name in (
            "replica_fetch_wait_max_ms",
            "fetch_rtt_ms",
            "append_interval_ms",
            "records_per_append",
            "alter_partition_latency_ms",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}: must be >= 1")
        if self.duration_ms is not None and self.duration_ms < 0:
            raise ConfigError("duration: must be >= 0")
