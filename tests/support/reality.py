"""isrwatch against the session lab's brokers: what it stored, what the brokers logged, and how to compare them."""

from __future__ import annotations

import datetime
import re
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import msgspec

from isrwatch.lab.record import Lab
from isrwatch.lab.truth import PartitionState
from isrwatch.store import open_store
from tests.support.jobs import drain
from tests.support.lab import LAG_MS, FaultWindow, states
from tests.support.net import serving

SHRINKING = re.compile(
    r"^\[(?P<at>[\d-]+ [\d:,]+)\] INFO \[Partition (?P<topic>\S+)-(?P<partition>\d+) broker=(?P<broker>\d+)\] "
    r"Shrinking ISR from (?P<before>[\d,]+) to (?P<after>[\d,]+)\.",
    re.M,
)


@dataclass
class Reality:
    lab: Lab
    store: str
    windows: list[FaultWindow]
    frontier: int  # the store's event time for the lab's cluster: decided up to it
    events: list[dict]  # what the agents sent

    @property
    def settled(self) -> int:
        """Sides older than this have met their partner or were judged: past the audit window (the lag)."""
        return self.frontier - LAG_MS


def say(message: str) -> None:
    print(f"reality: {message}", file=sys.stderr, flush=True)


def stored(reality: Reality, what: str, **filters: object) -> list[dict]:
    """Every record of one store list (`decisions`, `observed`, ...) as JSON objects."""
    with open_store(reality.store) as store:
        return msgspec.to_builtins(drain(lambda **page: getattr(store, what)(**filters, **page)))


def in_window(ts: int, window: FaultWindow) -> bool:
    return window.start_ms <= ts <= window.end_ms


def _kind(divergence: dict) -> str:
    """A divergence's kind, with the rule that excused it for a timing one: `timing/split`."""
    return divergence["kind"] + (f"/{divergence['cause']}" if divergence.get("cause") else "")


def served(reality: Reality) -> Iterator[tuple[PartitionState, dict]]:
    """Every partition as the cluster has it now, with what `GET /v1/partitions/{t}/{p}/isr` serves for it."""
    with serving(reality.store) as base:
        for (topic, partition), state in sorted(states(reality.lab).items()):
            params = {"cluster": reality.lab.cluster}
            yield state, httpx.get(f"{base}/v1/partitions/{topic}/{partition}/isr", params=params).json()


def _log_ms(stamp: str) -> int:
    """server.log's local wall-clock stamp as epoch ms."""
    return int(datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp() * 1000)


def shrink_lines(reality: Reality) -> Counter[tuple[int, str, int, tuple[int, ...], tuple[int, ...]]]:
    """The settled `Shrinking ISR` lines of the brokers' server.log: (broker, topic, partition, ISR before, after)."""
    logged: Counter[tuple[int, str, int, tuple[int, ...], tuple[int, ...]]] = Counter()
    for broker in reality.lab.brokers:
        text = (Path(broker.kafka_logs_dir) / "server.log").read_text(errors="replace")
        for m in SHRINKING.finditer(text):
            if _log_ms(m["at"]) < reality.settled:
                before, after = (tuple(sorted(map(int, m[k].split(",")))) for k in ("before", "after"))
                logged[(int(m["broker"]), m["topic"], int(m["partition"]), before, after)] += 1
    return logged
