"""A real agent recording with one broker's clock moved: the input of the corroboration tests."""

from __future__ import annotations

import json
from pathlib import Path

from isrwatch.state.config import Config

YEAR_MS = 365 * 24 * 3600 * 1000


DATA = Path(__file__).parents[1] / "agent" / "data"


AGENT = Config(replica_lag_time_max_ms=6000).with_profile("agent")


TIME_FIELDS = ("ts", "check_ms", "end_ms", "last_isr_change_ms", "last_propagation_ms")


def encoded(events: list[dict]) -> list[bytes]:
    return [json.dumps(ev).encode() for ev in events]


def recording(skewed: int | None = None, shift_ms: int = 0) -> list[dict]:
    """The three brokers' streams in the order they happened (their own clocks; broker `skewed`'s moved by
    `shift_ms`), as the events topic receives them."""
    events = []
    for broker in (1, 2, 3):
        for line in (DATA / f"broker{broker}.events.jsonl").read_bytes().splitlines():
            ev = json.loads(line)
            events.append((ev["ts"], broker, ev))
    events.sort(key=lambda item: item[:2])
    return [
        {k: v + shift_ms if k in TIME_FIELDS and v is not None else v for k, v in ev.items()} if b == skewed else ev
        for _, b, ev in events
    ]


def led_by(broker: int, events: list[dict]) -> set[tuple[str, int]]:
    """The partitions `broker` leads at some time of the recording."""
    states = [ev for ev in events if ev["type"] == "leader_and_isr"]
    return {(ev["topic"], ev["partition"]) for ev in states if ev["leader"] == broker}
