"""Small builders for engine tests: SPEC §3 events as dicts, run through the real parser and engine."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from isrwatch.state.config import Config
from isrwatch.state.events import DeadLetter, parse_event
from isrwatch.state.replay import ReplayResult, replay_events


def lai(
    ts: int,
    leader: int,
    isr: list[int],
    replicas: list[int],
    leader_epoch: int,
    *,
    controller_epoch: int = 1,
    partition_epoch: int = 0,
    topic: str = "t",
    partition: int = 0,
    **extra,
) -> dict:
    return {
        "type": "leader_and_isr",
        "ts": ts,
        "topic": topic,
        "partition": partition,
        "controller_epoch": controller_epoch,
        "leader": leader,
        "leader_epoch": leader_epoch,
        "isr": isr,
        "replicas": replicas,
        "partition_epoch": partition_epoch,
        **extra,
    }


def fetch(
    ts: int, replica: int, fetch_offset: int, leader_leo: int, *, topic: str = "t", partition: int = 0, **extra
) -> dict:
    return {
        "type": "fetch",
        "ts": ts,
        "topic": topic,
        "partition": partition,
        "replica": replica,
        "fetch_offset": fetch_offset,
        "leader_leo": leader_leo,
        **extra,
    }


def append(ts: int, leader_leo: int, *, topic: str = "t", partition: int = 0, **extra) -> dict:
    return {"type": "append", "ts": ts, "topic": topic, "partition": partition, "leader_leo": leader_leo, **extra}


def tick(ts: int, task: str | None = None, **extra) -> dict:
    ev = {"type": "tick", "ts": ts, **extra}
    if task:
        ev["task"] = task
    return ev


def parse_all(events: list[dict]) -> list:
    parsed = []
    for i, raw in enumerate(events, start=1):
        ev = parse_event(json.dumps(raw), seq=i, arrival=i)
        assert not isinstance(ev, DeadLetter), ev
        parsed.append(ev)
    return parsed


@dataclass
class Outcome:
    """A run's outputs as their SPEC §5 JSON: what the rule tests assert on, whichever runner produced them."""

    decisions: list[dict]
    propagations: list[dict]
    states: list[dict]
    dead_letters: list[dict]
    summary: dict
    observed: list[dict]
    divergences: list[dict]
    alter_partitions: list[dict]
    incidents: list[dict]

    @classmethod
    def of(cls, result: ReplayResult) -> Outcome:
        return cls(
            msgspec.to_builtins(result.decisions),
            msgspec.to_builtins(result.propagations),
            msgspec.to_builtins(result.records),
            [d.to_record() for d in result.dead_letters],
            result.summary,
            msgspec.to_builtins(result.observed),
            msgspec.to_builtins(result.divergences),
            msgspec.to_builtins(result.alter_partitions),
            [i.to_record() for i in result.incidents],
        )


Run = Callable[..., Outcome]


def lines_of(events: list[dict]) -> list[bytes]:
    """The events as input lines, each carrying its position as `seq` (so any cut or file split orders ties alike)."""
    return [msgspec.json.encode({"seq": i, **ev}) for i, ev in enumerate(events, start=1)]


def stream_config(events: list[dict], config: dict) -> Config:
    """The run's configuration, with an allowed lateness that makes no event late however the lines are cut
    (replay and stream agree exactly when nothing is late: SPEC §6)."""
    newest, behind = -1, 0
    for ev in events:
        behind = max(behind, newest - ev["ts"])
        newest = max(newest, ev["ts"])
    return Config(**{"allowed_lateness_ms": max(Config().allowed_lateness_ms, behind + 1), **config})


def run_local(events: list[dict], until: int | None = None, **config) -> Outcome:
    """One pass (`isrwatch replay`), seq = position."""
    return Outcome.of(replay_events(parse_all(events), Config(**config), until))


def run_stateful(events: list[dict], until: int | None = None, **config) -> Outcome:
    """The streaming shell without Spark: every line its own micro-batch, four buckets; every third batch fails
    once and runs again from the state before it."""
    from isrwatch.streaming.testing import run_stateful as stateful

    lines = lines_of(events)
    every = range(len(lines))
    return Outcome.of(stateful(lines, every, stream_config(events, config), buckets=4, until=until, aborts=every[::3]))


def run_spark(events: list[dict], until: int | None = None, *, tmp: Path, **config) -> Outcome:
    """The real streaming query (`isrwatch replay --engine spark`): the lines in three files, one per micro-batch."""
    from isrwatch.streaming.replay_spark import replay_spark

    lines = lines_of(events)
    size = -(-len(lines) // 3)
    paths = []
    for i in range(0, len(lines), size):
        path = tmp / f"events-{i:04d}.jsonl"
        path.write_bytes(b"\n".join(lines[i : i + size]) + b"\n")
        paths.append(path)
    return Outcome.of(replay_spark(paths, stream_config(events, config), until, buckets=4))


def canonical(rows: Sequence[Any]) -> list[str]:
    """Records (structs or their JSON) as sorted JSON texts: decisions and propagations compare as multisets."""
    return sorted(json.dumps(msgspec.to_builtins(r), sort_keys=True) for r in rows)


def state_of(result: Outcome, topic: str = "t", partition: int = 0) -> dict:
    return next(s for s in result.states if s["topic"] == topic and s["partition"] == partition)


def follower(state: dict, replica: int) -> dict:
    return next(f for f in state["followers"] if f["replica"] == replica)


def kinds(result: Outcome) -> list[tuple[int, str]]:
    return [(d["ts"], d["kind"]) for d in result.decisions]
