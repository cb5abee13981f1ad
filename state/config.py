"""isrwatch configuration (SPEC §2): Kafka's replica and ISR-propagation settings as plain data."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any


class ConfigError(ValueError):
    """A configuration key or value that isrwatch cannot use; the message names the key."""


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
    max_future_ms: int = 60000  # an event dated more than this ahead of its arrival is refused (ts_in_future)
    # The audit of agent input (SPEC §7): how long a side waits for its partner (None = replica_lag_time_max_ms,
    # which spans the next isr-expiration run), and the clock difference a `timing` divergence may hinge on.
    audit_window_ms: int | None = None
    audit_timing_ms: int = 100

    @property
    def expiration_interval_ms(self) -> int:
        """The isr-expiration period actually in force (Kafka: replica.lag.time.max.ms / 2)."""
        if self.isr_expiration_interval_ms is None:
            return self.replica_lag_time_max_ms // 2
        return self.isr_expiration_interval_ms

    @property
    def audit_window(self) -> int:
        return self.replica_lag_time_max_ms if self.audit_window_ms is None else self.audit_window_ms

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
            elif not _is_int(value):
                raise ConfigError(f"{key}: must be an integer, got {value!r}")
            elif key in ("replica_lag_time_max_ms", "min_insync_replicas") and value < 1:
                raise ConfigError(f"{key}: must be >= 1, got {value}")
            elif key != "schedule_origin_ms" and value < 0:
                raise ConfigError(f"{key}: must be >= 0, got {value}")
        return cls(**raw)

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
