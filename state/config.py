"""isrwatch configuration (SPEC §2): Kafka's replica and ISR-propagation settings as plain data."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, fields, replace
from functools import cache, cached_property
from typing import Any


class ConfigError(ValueError):
    """A configuration key or value that isrwatch cannot use; the message names the key."""


# The Kafka versions isrwatch models: 2.4 to 3.9 (ZooKeeper mode or AlterPartition) and 4.x (KRaft only: 4.0 removed
# ZooKeeper), as `kafka_version` or an agent tick names them: MAJOR.MINOR, an optional .PATCH and an optional -suffix.
KAFKA_VERSION_PATTERN = r"(2\.[4-9]|3\.[0-9]|4\.[0-9])(\.[0-9]+)?(-[A-Za-z0-9._-]+)?"
_KAFKA_VERSION = re.compile(KAFKA_VERSION_PATTERN)

# How a leader writes its ISR (SPEC §2, §4.9): itself, to ZooKeeper (IBP below 2.7), or by proposing it to the
# controller with an AlterPartition request (KIP-497: IBP 2.7+, and every KRaft cluster).
ZOOKEEPER = "zookeeper"
ALTER_PARTITION = "alter_partition"
ISR_PROTOCOLS = (ZOOKEEPER, ALTER_PARTITION)


@dataclass(frozen=True)
class KafkaRules:
    """The partition-leader rules that differ between the Kafka versions isrwatch models (SPEC §4.8). Each flag is
    named after the Kafka code that has it and is set from the release that brought it; the rules in
    `state.partition` branch on them where Kafka's code does."""

    # 3.1: every successful ISR write ends in maybeIncrementLeaderHW (Partition.handleAlterPartitionUpdate),
    # the expand too; before, only maybeShrinkIsr ran it.
    hw_after_isr_update: bool
    # 3.3: Replica.updateFetchStateOrThrow keeps lastFetchLeaderLogEndOffset = max(previous, the leader's LEO).
    max_last_fetch_leader_log_end_offset: bool
    # 3.3: Replica.resetReplicaState: a re-elected leader sets lastFetchTimeMs = 0 for a follower outside the ISR.
    reset_replica_state: bool
    # 3.7: maybeIncrementLeaderHW leaves the HW while the ISR is smaller than the effective min.insync.replicas.
    under_min_isr_holds_hw: bool
    # 3.1: the ISR write runs outside the partition's lock (Partition@3.1.0 L772, L955): while it is in flight the
    # partition is pending, and no fetch expands it nor check shrinks it (Partition@3.9.0-rc3 L1023, L1245). 2.x and
    # 2.8-3.0 hold the write lock through the ZooKeeper write. Applied in ZooKeeper mode when the agent reports the
    # write's commit (`isr_updated`); an AlterPartition proposal is always in flight until its response.
    isr_write_in_flight: bool
    # 3.7: isUnderMinIsr / isAtMinIsr compare the ISR size with Partition.effectiveMinIsr, min.insync.replicas at most
    # the replication factor; before, with min.insync.replicas as it is.
    effective_min_isr: bool


def kafka_rules(version: Any) -> KafkaRules:
    """The rule set of a Kafka version ("2.6", "3.9.2", "3.9.0-rc3"); ConfigError if isrwatch does not model it."""
    if not isinstance(version, str):
        raise ConfigError(f'kafka_version: must be a string such as "3.9.2", got {version!r}')
    return _kafka_rules(version)


@cache
def _kafka_rules(version: str) -> KafkaRules:
    match = _KAFKA_VERSION.fullmatch(version)
    if match is None:
        raise ConfigError(
            f"kafka_version: {version!r} is not a Kafka version isrwatch models: 2.4 to 4.9, "
            'as MAJOR.MINOR[.PATCH][-suffix], e.g. "2.6", "3.9.2" or "4.1.0"'
        )
    at = tuple(int(n) for n in match.group(1).split("."))
    return KafkaRules(
        hw_after_isr_update=at >= (3, 1),
        max_last_fetch_leader_log_end_offset=at >= (3, 3),
        reset_replica_state=at >= (3, 3),
        under_min_isr_holds_hw=at >= (3, 7),
        isr_write_in_flight=at >= (3, 1),
        effective_min_isr=at >= (3, 7),
    )


@cache
def _release(version: str) -> tuple[int, int]:
    """MAJOR.MINOR of a modelled Kafka version (ConfigError if not one)."""
    _kafka_rules(version)
    major, minor = version.split(".")[:2]
    return int(major), int(minor.split("-")[0])


def isr_protocol(version: str, configured: str) -> str:
    """The way a broker running `version` writes its ISR, `configured` the config's or its own tick's: 4.x has only
    AlterPartition; ConfigError if the version cannot speak the one configured."""
    if configured not in ISR_PROTOCOLS:
        raise ConfigError(f"isr_protocol: must be one of {', '.join(ISR_PROTOCOLS)}, got {configured!r}")
    kafka_rules(version)
    at = _release(version)
    if at >= (4, 0):  # KIP-500: 4.0 removed ZooKeeper; every leader proposes with AlterPartition
        return ALTER_PARTITION
    if configured == ALTER_PARTITION and at < (2, 7):  # KIP-497: AlterIsr came in 2.7
        raise ConfigError(
            f"isr_protocol: Kafka {version} has no AlterPartition (AlterIsr came in 2.7, KIP-497); use {ZOOKEEPER!r}"
        )
    return configured


@dataclass(frozen=True)
class Config:
    """The settings that drive every rule; all times in milliseconds of event time."""

    replica_lag_time_max_ms: int = 30000
    isr_expiration_interval_ms: int | None = None  # None = replica_lag_time_max_ms // 2, as Kafka does
    isr_change_check_interval_ms: int = 2500
    isr_change_linger_ms: int = 5000
    isr_change_max_delay_ms: int = 60000
    schedule_origin_ms: int = 0
    min_insync_replicas: int = 1
    min_insync_replicas_by_topic: dict[str, int] = field(default_factory=dict)
    allowed_lateness_ms: int = 5000
    # Streaming, brokers sending watermarks (SPEC §6): how far the frontier stays behind the brokers' streams while
    # one of the cluster's brokers is away, so that its first events when it comes back are not late.
    broker_rejoin_margin_ms: int = 250
    # Streaming, brokers sending watermarks (SPEC §6): how long a broker whose stream stopped (stalled, stopped, dead)
    # still holds back the partitions it acts on, so that the events its agent captured just before come in their place
    # when it resumes: Kafka's default zookeeper.session.timeout.ms, until which Kafka keeps a silent broker's roles.
    broker_stall_wait_ms: int = 18000
    max_future_ms: int = 60000  # an event dated more than this ahead of its arrival is refused (ts_in_future)
    # The audit of agent input (SPEC §7): how long a side waits for its partner (None = replica_lag_time_max_ms,
    # which spans the next isr-expiration run), and the clock difference a `timing` divergence may hinge on.
    audit_window_ms: int | None = None
    audit_timing_ms: int = 100
    # Streaming (SPEC §5, "Stored rows"): how old a partition's stored row may grow while only its offsets and fetch
    # times move; 0 = write every partition its batch touched.
    partition_refresh_ms: int = 10000
    kafka_version: str = "2.6"  # the brokers' Kafka version, for its rule set (an agent's tick overrides it per broker)
    isr_protocol: str = ZOOKEEPER  # how leaders write their ISR (an agent's tick overrides it per broker)
    # Incidents (SPEC §8): a follower's shrinks on many leaders within this are one incident, and an incident stays
    # open this long past its last join; an AlterPartition request in flight this long is an `isr_change_pending` one.
    incident_window_ms: int = 10000
    isr_change_pending_ms: int = 5000
    timeline_retention_ms: int = 86_400_000  # the store keeps the timeline's history this long (event time)

    @property
    def expiration_interval_ms(self) -> int:
        """The isr-expiration period actually in force (Kafka: replica.lag.time.max.ms / 2)."""
        if self.isr_expiration_interval_ms is None:
            return self.replica_lag_time_max_ms // 2
        return self.isr_expiration_interval_ms

    @property
    def audit_window(self) -> int:
        return self.replica_lag_time_max_ms if self.audit_window_ms is None else self.audit_window_ms

    @cached_property
    def rules(self) -> KafkaRules:
        """The rule set of `kafka_version` (SPEC §4.8)."""
        return kafka_rules(self.kafka_version)

    @cached_property
    def alter_partition(self) -> bool:
        """Whether leaders propose their ISR changes with AlterPartition (SPEC §4.9): `isr_protocol`, or Kafka 4.x."""
        return isr_protocol(self.kafka_version, self.isr_protocol) == ALTER_PARTITION

    def for_broker(self, version: str, protocol: str | None = None) -> Config:
        """This configuration as a broker running `version` (with `protocol`, its own ISR protocol) applies it;
        ConfigError if not a modelled version or a protocol the version cannot speak."""
        protocol = self.isr_protocol if protocol is None else protocol
        isr_protocol(version, protocol)
        return replace(self, kafka_version=version, isr_protocol=protocol)

    def min_isr(self, topic: str) -> int:
        return self.min_insync_replicas_by_topic.get(topic, self.min_insync_replicas)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Config:
        """Build a config, rejecting unknown keys and out-of-range values by name."""
        if not isinstance(raw, dict):
            raise ConfigError("config must be a JSON object of SPEC §2 keys")
        known = {f.name for f in fields(cls)}
        for key in raw:
            if key not in known:
                raise ConfigError(f"unknown config key {key!r}; known keys: {', '.join(sorted(known))}")
        for key, value in raw.items():
            if key == "min_insync_replicas_by_topic":
                if not isinstance(value, dict) or not all(
                    isinstance(k, str) and _is_int(v) and v >= 1 for k, v in value.items()
                ):
                    raise ConfigError(f"{key}: must be an object mapping topic names to integers >= 1")
            elif key in ("isr_expiration_interval_ms", "audit_window_ms") and value is None:
                continue
            elif key == "kafka_version":
                kafka_rules(value)
            elif key == "isr_protocol":
                isr_protocol("3.9", value)
            elif not _is_int(value):
                raise ConfigError(f"{key}: must be an integer, got {value!r}")
            elif key in ("replica_lag_time_max_ms", "min_insync_replicas") and value < 1:
                raise ConfigError(f"{key}: must be >= 1, got {value}")
            elif key != "schedule_origin_ms" and value < 0:
                raise ConfigError(f"{key}: must be >= 0, got {value}")
        config = cls(**raw)
        isr_protocol(config.kafka_version, config.isr_protocol)
        return config

    def with_profile(self, name: str | None) -> Config:
        """A named set of overrides (`PROFILES`): `agent` runs checks and propagation on the brokers' own ticks."""
        if name is None:
            return self
        if name not in PROFILES:
            raise ConfigError(f"--profile {name!r}: known profiles: {', '.join(sorted(PROFILES))}")
        return Config.from_dict({**self.to_dict(), **PROFILES[name]})

    def with_overrides(self, pairs: list[str]) -> Config:
        """Apply `KEY=VALUE` strings (VALUE parsed as JSON, e.g. 10000 or {"t": 2})."""
        merged = {k: v for k, v in self.to_dict().items()}
        for pair in pairs:
            key, sep, text = pair.partition("=")
            if not sep:
                raise ConfigError(f"--set {pair!r}: expected KEY=VALUE")
            try:
                merged[key.strip()] = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"--set {key}: value {text!r} is not JSON ({exc.msg})") from None
            except RecursionError:
                raise ConfigError(f"--set {key}: value nested too deeply") from None
        return Config.from_dict(merged)


# Input from isrwatch-agent carries every broker's real isr-expiration and isr-change-propagation runs as
# ticks: the model must not add scheduled runs of its own (SPEC §3.1).
PROFILES: dict[str, dict[str, Any]] = {
    "agent": {"isr_expiration_interval_ms": 0, "isr_change_check_interval_ms": 0},
}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
