"""Where a state change sits in event time: the order key shared by the engine and the propagation book.

At one instant, input events (and explicit ticks) run first in (seq, arrival) order, then the
scheduled isr-expiration check, then the scheduled propagation check (SPEC §4). An explicit tick
without a task runs both halves, isr-expiration first.
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple

from .events import Event, sorts_at


class Phase(IntEnum):
    EVENT = 0  # an input event or explicit tick, ordered among its instant by (seq, arrival)
    SCHEDULED_EXPIRATION = 1  # the scheduled isr-expiration check
    SCHEDULED_PROPAGATION = 2  # the scheduled isr-change-propagation check


class Half(IntEnum):
    """The two tasks of one explicit tick: isr-expiration runs before isr-change-propagation."""

    EXPIRATION = 0
    PROPAGATION = 1


class Order(NamedTuple):
    """(ts, phase, seq, arrival, half): sorts changes and ticks the way one pass over the events would."""

    ts: int
    phase: int
    seq: int = 0
    arrival: int = 0
    half: int = Half.EXPIRATION

    @classmethod
    def of_event(cls, ev: Event, half: Half = Half.EXPIRATION) -> Order:
        """Where the engine applies `ev` (`sorts_at`): an agent's append at its check's clock, an isr-expiration
        tick at the end of its run. A change made there is pending for the propagation book from there, not from
        the run's start: Kafka adds a partition to isrChangeSet only after its check's ZooKeeper write
        (ZkAlterPartitionManager.scala 3.9 L70-79), so a propagation run during the check run cannot take it."""
        return cls(sorts_at(ev), Phase.EVENT, ev.seq or 0, ev.arrival, half)

    @classmethod
    def scheduled_expiration(cls, at: int) -> Order:
        return cls(at, Phase.SCHEDULED_EXPIRATION)
