"""The fixed-rate scheduler Kafka runs its periodic checks on: origin + k·interval, k >= 0."""

from __future__ import annotations

from .partition import INF


def first_at_or_after(t: int, origin: int, interval: int) -> int:
    """The first scheduled run at or after `t` (INF when the schedule is off or `t` is INF)."""
    if interval <= 0 or t >= INF:
        return INF
    if t <= origin:
        return origin
    return origin + -(-(t - origin) // interval) * interval
