"""Small builders for engine tests: SPEC §3 events as dicts, run through the real parser and engine."""

from __future__ import annotations

import json

from state.config import Config
from state.events import DeadLetter, parse_event
from state.replay import ReplayResult, replay_events


def lai(ts: int, leader: int, isr: list[int], replicas: list[int], leader_epoch: int, *, controller_epoch: int = 1,
        partition_epoch: int = 0, topic: str = "t", partition: int = 0, **extra) -> dict:
    return {"type": "leader_and_isr", "ts": ts, "topic": topic, "partition": partition,
            "controller_epoch": controller_epoch, "leader": leader, "leader_epoch": leader_epoch, "isr": isr,
            "replicas": replicas, "partition_epoch": partition_epoch, **extra}


def fetch(ts: int, replica: int, fetch_offset: int, leader_leo: int, *, topic: str = "t", partition: int = 0,
          **extra) -> dict:
    return {"type": "fetch", "ts": ts, "topic": topic, "partition": partition, "replica": replica,
            "fetch_offset": fetch_offset, "leader_leo": leader_leo, **extra}


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


def run(events: list[dict], until: int | None = None, **config) -> ReplayResult:
    """Replay `events` (seq = position) with SPEC §2 config overrides."""
    return replay_events(parse_all(events), Config(**config), until)


def state_of(result: ReplayResult, topic: str = "t", partition: int = 0) -> dict:
    return next(s for s in result.states if s["topic"] == topic and s["partition"] == partition)


def follower(state: dict, replica: int) -> dict:
    return next(f for f in state["followers"] if f["replica"] == replica)


def kinds(result: ReplayResult) -> list[tuple[int, str]]:
    return [(d["ts"], d["kind"]) for d in result.decisions]
