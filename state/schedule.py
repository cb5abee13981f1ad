"""Event time's edges: "never", and the fixed-rate scheduler Kafka runs its periodic checks on."""

from __future__ import annotations

INF = 2**63 - 1  # "never": larger than any event time


def first_at_or_after(t: int, origin: int, interval: int) -> int:
    """The first scheduled run (origin + k·interval, k >= 0) at or after `t`; INF: schedule off, or `t` is INF."""
    if interval <= 0 or t >= INF:
        return INF
    if t <= origin:
        return origin
    return origin + -(-(t - origin) // interval) * interval
