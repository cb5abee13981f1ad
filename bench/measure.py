"""What the benchmarks share to measure: a percentile, a process's CPU from /proc, a free local port."""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Sequence
from pathlib import Path


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank percentile: the smallest value with at least q % of the values at or below it."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 < q <= 100:
        raise ValueError(f"percentile {q}: must be in (0, 100]")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def proc_cpu(pid: int) -> tuple[str, float]:
    """A process's command name (as /proc shows it, `(java`) and the user + system CPU seconds it has used;
    OSError if the process is gone."""
    name, rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)
    fields = rest.split()
    return name, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
