"""Scripted faults (the `--fault` language, JSON fault lists) and the preset fault stories."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from isrwatch.state.config import Config, ConfigError

from .config import DEFAULT_TOPICS, TopicSpec

# kind -> (required keys, optional keys)
_FAULT_KEYS: dict[str, tuple[set[str], set[str]]] = {
    "stall": ({"broker", "start"}, {"end"}),
    "slow": ({"broker", "start"}, {"end", "share", "rtt"}),
    "crash": ({"broker", "start"}, {"end"}),
    "failover": ({"start"}, {"to", "stale"}),
    "burst": ({"broker", "start", "end"}, {"resume"}),
    "elect": ({"start"}, set()),
    "stuck-controller": ({"broker", "start"}, {"end"}),
    "fence": ({"broker", "start"}, {"end", "notice"}),
}

FAULT_HELP = """faults (--fault KIND:KEY=VALUE:..., repeatable; times from the start: 30s, 1.5m, 500ms, bare = s):
  stall:broker=B:start=T[:end=T]     B's replica fetchers stop: its followers get stuck
  slow:broker=B:start=T[:end=T][:share=0.5][:rtt=1s]
                                     B's fetches bring only `share` of what it misses, every `rtt`
  crash:broker=B:start=T[:end=T]     B dies; after zookeeper.session.timeout.ms the controller
                                     moves its leaderships and removes it from ISRs; `end` restarts it
  failover:start=T[:to=B][:stale=2]  a new controller (epoch+1) re-sends LeaderAndIsr for every
                                     partition; the old one still sends `stale` requests
  burst:broker=B:start=T:end=T[:resume=5s]
                                     B's followers stall one after another, each for longer than
                                     the lag, then fetch for `resume`: a stream of shrinks/expands
  elect:start=T                      preferred leader election (auto.leader.rebalance)
with --isr-protocol alter_partition:
  stuck-controller:broker=B:start=T[:end=T]
                                     the controller holds B's AlterPartition answers (a stuck
                                     channel): its request stays in flight, its queue grows; `end`
                                     answers them
  fence:broker=B:start=T[:end=T][:notice=1s]
                                     the controller fences B: it answers INELIGIBLE_REPLICA to a
                                     proposal adding B; the leaders learn of it `notice` later
                                     (broker_registration) and stop proposing B until `end`
"""


@dataclass(frozen=True)
class Fault:
    """One scripted fault; times in ms from the simulation start, `end_ms` None = never ends."""

    kind: str
    start_ms: int
    end_ms: int | None = None
    broker: int | None = None
    share: float = 0.5  # slow: the part of the missing data one fetch brings
    rtt_ms: int = 1000  # slow: the follower's fetch round trip
    to: int | None = None  # failover: the new controller (default: the next live broker)
    stale: int = 2  # failover: requests the old controller still sends
    resume_ms: int = 5000  # burst: how long each follower fetches between two stalls
    notice_ms: int = 1000  # fence: how long before the leaders' metadata says the broker is fenced

    def __str__(self) -> str:
        """The fault in the --fault language (parse_fault reads it back)."""
        text = [self.kind]
        if self.broker is not None:
            text.append(f"broker={self.broker}")
        text.append(f"start={_fmt(self.start_ms)}")
        if self.end_ms is not None:
            text.append(f"end={_fmt(self.end_ms)}")
        _, optional = _FAULT_KEYS[self.kind]
        for key, value, default, shown in (
            ("share", self.share, 0.5, f"{self.share:g}"),
            ("rtt", self.rtt_ms, 1000, _fmt(self.rtt_ms)),
            ("to", self.to, None, str(self.to)),
            ("stale", self.stale, 2, str(self.stale)),
            ("resume", self.resume_ms, 5000, _fmt(self.resume_ms)),
            ("notice", self.notice_ms, 1000, _fmt(self.notice_ms)),
        ):
            if key in optional and value != default:
                text.append(f"{key}={shown}")
        return ":".join(text)


def _fmt(ms: int) -> str:
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def parse_duration(value: Any, name: str = "time") -> int:
    """A time in ms from `30s`, `1.5m`, `500ms`, `2h` or a bare number of seconds."""
    if isinstance(value, bool):
        raise ConfigError(f"{name}: expected a time like 30s, got {value!r}")
    if isinstance(value, int | float):
        value = f"{value}s"
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*", str(value))
    if not m:
        raise ConfigError(f"{name}: expected a time like 30s, 1.5m or 500ms, got {value!r}")
    scale = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, None: 1000}[m.group(2)]
    return round(float(m.group(1)) * scale)


def fault_from_dict(raw: dict[str, Any], brokers: int | None = None) -> Fault:
    """Validate one fault object (`{"kind": "stall", "broker": 2, "start": "30s", ...}`)."""
    raw = dict(raw)
    kind = raw.pop("kind", None)
    if kind not in _FAULT_KEYS:
        raise ConfigError(f"fault kind {kind!r}: expected one of {', '.join(_FAULT_KEYS)}")
    required, optional = _FAULT_KEYS[kind]
    for key in raw:
        if key not in required | optional:
            raise ConfigError(f"{kind}: unknown key {key!r}; allowed: {', '.join(sorted(required | optional))}")
    for key in required - raw.keys():
        raise ConfigError(f"{kind}: missing {key}=")
    args: dict[str, Any] = {"kind": kind, "start_ms": parse_duration(raw["start"], f"{kind} start")}
    if "end" in raw:
        args["end_ms"] = parse_duration(raw["end"], f"{kind} end")
        if args["end_ms"] <= args["start_ms"]:
            raise ConfigError(f"{kind}: end must be after start")
    for key in ("broker", "to", "stale"):
        if key in raw:
            args[key] = _int(raw[key], f"{kind} {key}")
    if "share" in raw:
        try:
            args["share"] = float(raw["share"])
        except ValueError:
            raise ConfigError(f"{kind} share: expected a number, got {raw['share']!r}") from None
        if not 0 < args["share"] < 1:
            raise ConfigError(f"{kind} share: must be between 0 and 1 (exclusive)")
    if "rtt" in raw:
        args["rtt_ms"] = max(1, parse_duration(raw["rtt"], f"{kind} rtt"))
    if "resume" in raw:
        args["resume_ms"] = max(1, parse_duration(raw["resume"], f"{kind} resume"))
    if "notice" in raw:
        args["notice_ms"] = parse_duration(raw["notice"], f"{kind} notice")
    for key in ("broker", "to"):
        if key in args and brokers is not None and not 1 <= args[key] <= brokers:
            raise ConfigError(f"{kind} {key}={args[key]}: brokers are 1..{brokers}")
    return Fault(**args)


def parse_fault(text: str, brokers: int | None = None) -> Fault:
    """One fault from the CLI mini-language: `stall:broker=2:start=30s:end=90s`."""
    kind, *pairs = text.strip().split(":")
    raw: dict[str, Any] = {"kind": kind}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ConfigError(f"--fault {text!r}: expected KEY=VALUE after {kind}:, got {pair!r}")
        raw[key.strip()] = value.strip()
    return fault_from_dict(raw, brokers)


def _int(value: Any, name: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}: expected an integer, got {value!r}") from None


@dataclass(frozen=True)
class Scenario:
    description: str
    faults: tuple[Fault, ...]
    duration_ms: int
    topics: tuple[TopicSpec, ...] | None = None  # None: the configured topics


def scenario(name: str, kafka: Config) -> Scenario:
    """A preset fault story, timed from the brokers' lag so it plays out under any replica.lag.time.max.ms."""
    lag = kafka.replica_lag_time_max_ms
    shrink = lag + kafka.expiration_interval_ms + 10_000  # a fault this long certainly shrinks the ISR
    settle = kafka.isr_change_linger_ms + kafka.isr_change_check_interval_ms + 10_000
    s = 10_000
    if name in ("stall", "slow"):
        fault = Fault(name, s, s + shrink, broker=2)
        what = "stops fetching (stuck)" if name == "stall" else "fetches but falls behind (slow)"
        return Scenario(f"broker 2 {what} for {_fmt(shrink)}, then catches up", (fault,), s + shrink + settle)
    if name == "crash":
        restart = s + 6000 + shrink
        return Scenario(
            "broker 1 crashes, the controller moves its leaderships; it restarts and catches "
            "up; then a preferred leader election",
            (Fault("crash", s, restart, broker=1), Fault("elect", restart + 15_000)),
            restart + 15_000 + settle,
        )
    if name == "failover":
        return Scenario(
            "the controller fails over; the old one still sends 3 stale-epoch requests",
            (Fault("failover", s, stale=3),),
            s + settle,
        )
    if name == "burst":
        end = s + shrink + 2 * kafka.isr_change_max_delay_ms + 10_000
        return Scenario(
            "broker 2's followers stall one after another: a continuous stream of ISR changes "
            "that propagation throttles into batches",
            (Fault("burst", s, end, broker=2),),
            end + shrink + settle,
            topics=(*DEFAULT_TOPICS, TopicSpec("events", 48, 3)),
        )
    if name == "story":
        stall_at = 15_000
        slow_at = stall_at + shrink + settle
        crash_at = slow_at + shrink + settle
        restart = crash_at + 6000 + shrink
        elect_at = restart + settle
        failover_at = elect_at + settle
        faults = (
            Fault("stall", stall_at, stall_at + shrink, broker=2),
            Fault("slow", slow_at, slow_at + shrink, broker=3),
            Fault("crash", crash_at, restart, broker=4),
            Fault("elect", elect_at),
            Fault("failover", failover_at, stale=2),
        )
        return Scenario(
            "a stall, a slow broker, a crash and its recovery, a preferred leader election and "
            "a controller failover, one after another",
            faults,
            failover_at + settle,
        )
    if name == "stuck-queue":
        return _stuck_queue(kafka, shrink)
    raise ConfigError(f"scenario {name!r}: expected one of {', '.join(SCENARIOS)}")


def _stuck_queue(kafka: Config, shrink: int) -> Scenario:
    """AlterPartition's blind spot (linkedin/kafka PR #453): the controller holds broker 1's answers while broker 2,
    then broker 3, stall. Broker 1's first shrink request stays in flight, its partitions stay pending (no expand
    when broker 2 is back, no shrink of broker 3), its later shrinks wait in its queue; then the answers arrive,
    the queue goes at once and every ISR commits."""
    first = 15_000
    second = first + shrink  # broker 3 stalls as broker 2 resumes
    answers = second + shrink + kafka.expiration_interval_ms  # after broker 3's shrinks have queued
    return Scenario(
        "the controller holds broker 1's AlterPartition answers while broker 2, then broker 3, stall: its first "
        "shrink request stays in flight, its partitions stay pending and its later shrinks queue behind; then the "
        "answers arrive and every ISR commits",
        (
            Fault("stuck-controller", first, answers, broker=1),
            Fault("stall", first, second, broker=2),
            Fault("stall", second, second + shrink, broker=3),
        ),
        answers + 20_000,
    )


SCENARIOS = ("stall", "slow", "crash", "failover", "burst", "story", "stuck-queue")
