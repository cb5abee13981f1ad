"""Where a state change sits in event time: the order key shared by the engine and the propagation book.

At one instant, input events (and explicit ticks) run first in (seq, arrival) order, then the
scheduled isr-expiration check, then the scheduled propagation check (SPEC §4). An explicit tick
without a task runs both halves, isr-expiration first.
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple, Protocol


class Phase(IntEnum):
    EVENT = 0  # an input event or explicit tick, ordered among its instant by (seq, arrival)
    SCHEDULED_EXPIRATION = 1  # the scheduled isr-expiration check
    SCHEDULED_PROPAGATION = 2  # the scheduled isr-change-propagation check


class Half(IntEnum):
    """The two tasks of one explicit tick: isr-expiration runs before isr-change-propagation."""

    EXPIRATION = 0
    PROPAGATION = 1


class Sequenced(Protocol):
    @property
    def ts(self) -> int: ...
    @property
    def seq(self) -> int | None: ...
    @property
    def arrival(self) -> int: ...


class Order(NamedTuple):
    """(ts, phase, seq, arrival, half): sorts changes and ticks the way one pass over the events would."""

    ts: int
    phase: int
    seq: int = 0
    arrival: int = 0
    half: int = Half.EXPIRATION

    @classmethod
    def of_event(cls, ev: Sequenced, half: Half = Half.EXPIRATION) -> Order:
        return cls(ev.ts, Phase.EVENT, ev.seq or 0, ev.arrival, half)

    @classmethod
    def scheduled_expiration(cls, at: int) -> Order:
        return cls(at, Phase.SCHEDULED_EXPIRATION)
