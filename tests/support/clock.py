"""Brokers whose clocks are off: a year ahead and ten minutes behind."""

from __future__ import annotations

import json
from pathlib import Path

DATA = Path(__file__).parents[1] / "agent" / "data"


YEAR = 365 * 86_400_000


SKEW = {1: YEAR, 3: -600_000}  # broker 1 a year ahead, broker 3 ten minutes behind


# Without arrival times a broker's offset is its newest event against the others' newest: the brokers stopped a few
# seconds apart at the end of the recording (broker 1 8.8 s after broker 2, broker 3 9.0 s after).
TOLERANCE_MS = 10_000


def skewed_lines(broker: int) -> list[bytes]:
    """Broker `broker`'s events with every time its clock stamped (`ts`, `*_ms`) moved by its skew."""
    out = []
    for line in (DATA / f"broker{broker}.events.jsonl").read_bytes().splitlines():
        ev = json.loads(line)
        for key in [k for k in ev if k == "ts" or k.endswith("_ms")]:
            ev[key] += SKEW.get(broker, 0)
        out.append(json.dumps(ev, separators=(",", ":")).encode())
    return out
