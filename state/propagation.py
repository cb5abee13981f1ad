"""Per-broker ISR-change propagation (SPEC §4.6; ReplicaManager.recordIsrChange/maybePropagateIsrChanges).

Each leader broker collects the partitions whose ISR it changed and sends them as one batch once
changes have been quiet for the linger time, or once the max delay since its last batch passed.
`PropagationBook` holds every broker's pending set and advances, like the partition engine, "up
to W": fed ISR changes and explicit ticks in any order and cut, it gives the batches of one pass.
"""

from __future__ import annotations

from operator import attrgetter

import msgspec
from msgspec import Struct

from .config import Config
from .partition import IsrChange, PropagationTick
from .records import BrokerRecord, Propagation, TopicPartition, Trigger
from .schedule import INF, first_at_or_after

STATE_VERSION = 1


class Broker(Struct, array_like=True):
    """One leader broker's throttle state; `pending` holds (topic, partition) pairs."""

    cluster: str
    broker: int
    pending: set[tuple[str, int]]
    first_change_ts: int | None
    last_isr_change_ms: int
    last_propagation_ms: int


class _BookState(Struct, array_like=True):
    version: int
    brokers: list[Broker]
    buffer: list[IsrChange | PropagationTick]
    applied_until: int
    next_check: int


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(_BookState)


class PropagationBook:
    """All brokers' pending ISR-change sets, advanced in event time."""

    def __init__(self, config: Config, blob: bytes | None = None) -> None:
        self.config = config
        self.interval = config.isr_change_check_interval_ms
        self.origin = config.schedule_origin_ms
        self.brokers: dict[tuple[str, int], Broker] = {}
        self.buffer: list[IsrChange | PropagationTick] = []
        self.applied_until = -INF
        self.next_check = first_at_or_after(self.origin, self.origin, self.interval)
        if blob is not None:
            state = _decoder.decode(blob)
            if state.version != STATE_VERSION:
                raise ValueError(f"propagation state version {state.version} is not {STATE_VERSION}")
            self.brokers = {(b.cluster, b.broker): b for b in state.brokers}
            self.buffer = state.buffer
            self.applied_until = state.applied_until
            self.next_check = state.next_check
        self._pending = {key for key, b in self.brokers.items() if b.pending}

    def to_bytes(self) -> bytes:
        return _encoder.encode(
            _BookState(STATE_VERSION, list(self.brokers.values()), self.buffer, self.applied_until, self.next_check)
        )

    def add(self, items: list[IsrChange | PropagationTick]) -> int:
        """Buffer changes and ticks; returns how many were too late (before what was already applied)."""
        late = 0
        for item in items:
            if item.ts < self.applied_until:
                late += 1
            else:
                self.buffer.append(item)
        return late

    def advance(self, until: int) -> list[Propagation]:
        """Apply every buffered item and scheduled check strictly before `until`; return the batches."""
        out: list[Propagation] = []
        if until <= self.applied_until:
            return out
        self.buffer.sort(key=attrgetter("order"))
        done = 0
        for item in self.buffer:
            if item.ts >= until:
                break
            self._run_checks_before(item.ts, out)
            if type(item) is IsrChange:
                self._record(item)
            else:
                self._check(item.ts, out, item.cluster)
            done += 1
        del self.buffer[:done]
        self._run_checks_before(until, out)
        self.applied_until = until
        return out

    def next_due(self) -> int:
        """The earliest time at which advancing could emit a batch or apply a buffered item."""
        due = min((item.ts for item in self.buffer), default=INF)
        if self._pending:
            due = min(due, max(self.next_check, first_at_or_after(self._deadline() + 1, self.origin, self.interval)))
        return due

    def brokers_view(self) -> list[BrokerRecord]:
        """Every broker's throttle state and pending set, for live views."""
        return [
            BrokerRecord(
                cluster=b.cluster,
                broker=b.broker,
                pending=_partitions(b.pending),
                first_change_ts=b.first_change_ts,
                last_isr_change_ms=b.last_isr_change_ms,
                last_propagation_ms=b.last_propagation_ms,
            )
            for b in sorted(self.brokers.values(), key=lambda b: (b.cluster, b.broker))
        ]

    def _record(self, change: IsrChange) -> None:
        key = (change.cluster, change.broker)
        broker = self.brokers.get(key)
        if broker is None:
            broker = self.brokers[key] = Broker(change.cluster, change.broker, set(), None, self.origin, self.origin)
        broker.pending.add((change.topic, change.partition))
        if broker.first_change_ts is None:
            broker.first_change_ts = change.ts
        broker.last_isr_change_ms = change.ts
        self._pending.add(key)

    def _deadline(self) -> int:
        c = self.config
        return min(
            min(b.last_isr_change_ms + c.isr_change_linger_ms, b.last_propagation_ms + c.isr_change_max_delay_ms)
            for b in (self.brokers[k] for k in self._pending)
        )

    def _run_checks_before(self, limit: int, out: list[Propagation]) -> None:
        """Run the scheduled checks before `limit`, jumping over the ones that cannot emit anything."""
        while self._pending:
            at = max(self.next_check, first_at_or_after(self._deadline() + 1, self.origin, self.interval))
            if at >= limit:
                break
            self._check(at, out, None)
            self.next_check = at + self.interval
        self.next_check = max(self.next_check, first_at_or_after(limit, self.origin, self.interval))

    def _check(self, now: int, out: list[Propagation], cluster: str | None) -> None:
        """ReplicaManager.maybePropagateIsrChanges at `now` for every broker (of `cluster`)."""
        c = self.config
        for key in sorted(self._pending):
            broker = self.brokers[key]
            if cluster is not None and broker.cluster != cluster:
                continue
            quiet = broker.last_isr_change_ms + c.isr_change_linger_ms < now
            overdue = broker.last_propagation_ms + c.isr_change_max_delay_ms < now
            if quiet or overdue:
                out.append(
                    Propagation(
                        ts=now,
                        cluster=broker.cluster,
                        broker=broker.broker,
                        partitions=_partitions(broker.pending),
                        trigger=Trigger.LINGER if quiet else Trigger.MAX_DELAY,
                        first_change_ts=broker.first_change_ts,
                        last_change_ts=broker.last_isr_change_ms,
                    )
                )
                broker.pending = set()
                broker.first_change_ts = None
                broker.last_propagation_ms = now
                self._pending.discard(key)


def _partitions(pending: set[tuple[str, int]]) -> list[TopicPartition]:
    return [TopicPartition(t, p) for t, p in sorted(pending)]
