"""Per-broker ISR-change propagation (SPEC §4.6; ReplicaManager.recordIsrChange/maybePropagateIsrChanges).

Each leader broker collects the partitions whose ISR it changed and sends them as one batch once
changes have been quiet for the linger time, or once the max delay since its last batch passed.
`PropagationBook` holds every broker's pending set and advances, like the partition engine, "up
to W": fed ISR changes and explicit ticks in any order and cut, it gives the batches of one pass.
Each cluster keeps its own event time (SPEC §6), so the book advances each cluster to its own W.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from operator import attrgetter
from typing import Any, Protocol

import msgspec
from msgspec import Struct

from .config import Config
from .records import BrokerRecord, IsrChange, Propagation, PropagationTick, TopicPartition, Trigger
from .schedule import INF, first_at_or_after

STATE_VERSION = 3


class Broker(Struct, array_like=True):
    """One leader broker's throttle state; `pending` maps (topic, partition) to when the model decided its last
    change (`IsrChange.decided`)."""

    cluster: str
    broker: int
    pending: dict[tuple[str, int], int]
    first_change_ts: int | None
    last_isr_change_ms: int
    last_propagation_ms: int


class ClusterBook(Struct, array_like=True):
    """One cluster's brokers and the changes and ticks not yet applied, settled up to `applied_until`."""

    cluster: str
    brokers: dict[int, Broker]
    buffer: list[IsrChange | PropagationTick]
    applied_until: int
    next_check: int


class _BookState(Struct, array_like=True):
    version: int
    clusters: list[ClusterBook]


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(_BookState)


class PropagationBook:
    """All brokers' pending ISR-change sets, each cluster advanced in its own event time."""

    def __init__(self, config: Config, blob: bytes | None = None) -> None:
        self.config = config
        self.interval = config.isr_change_check_interval_ms
        self.origin = config.schedule_origin_ms
        self.clusters: dict[str, ClusterBook] = {}
        if blob is not None:
            state = _decoder.decode(blob)
            if state.version != STATE_VERSION:
                raise ValueError(f"propagation state version {state.version} is not {STATE_VERSION}")
            self.clusters = {c.cluster: c for c in state.clusters}

    def to_bytes(self) -> bytes:
        return _encoder.encode(_BookState(STATE_VERSION, list(self.clusters.values())))

    def _cluster(self, name: str) -> ClusterBook:
        book = self.clusters.get(name)
        if book is None:
            book = self.clusters[name] = ClusterBook(
                name, {}, [], -INF, first_at_or_after(self.origin, self.origin, self.interval)
            )
        return book

    def add(self, items: Iterable[IsrChange | PropagationTick]) -> int:
        """Buffer changes and ticks; returns how many were too late (before what their cluster already applied)."""
        return buffer_in_time(items, self._cluster)

    def advance(self, until: int | Mapping[str, int]) -> list[Propagation]:
        """Apply every buffered item and scheduled check strictly before `until` (one time for every cluster, or
        a time per cluster: clusters not named stay where they are); return the batches in time order."""
        out: list[Propagation] = []
        frontiers = {name: until for name in self.clusters} if isinstance(until, int) else until
        for name, limit in frontiers.items():
            self._advance(self._cluster(name), limit, out)
        out.sort(key=lambda p: (p.ts, p.cluster, p.broker))
        return out

    def next_due(self) -> int:
        """The earliest time at which advancing could emit a batch or apply a buffered item."""
        due = INF
        for book in self.clusters.values():
            due = min(due, min((item.ts for item in book.buffer), default=INF))
            deadline = self._deadline(book)
            if deadline < INF:
                due = min(due, max(book.next_check, first_at_or_after(deadline + 1, self.origin, self.interval)))
        return due

    def pending_partitions(self) -> int:
        return sum(len(b.pending) for book in self.clusters.values() for b in book.brokers.values())

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
            for _, book in sorted(self.clusters.items())
            for _, b in sorted(book.brokers.items())
        ]

    def _advance(self, book: ClusterBook, until: int, out: list[Propagation]) -> None:
        if until <= book.applied_until:
            return
        book.buffer.sort(key=attrgetter("order"))
        done = 0
        for item in book.buffer:
            if item.ts >= until:
                break
            self._run_checks_before(book, item.ts, out)
            if isinstance(item, IsrChange):
                self._record(book, item)
            else:
                self._tick(book, item, out)
            done += 1
        del book.buffer[:done]
        self._run_checks_before(book, until, out)
        book.applied_until = until

    def _record(self, book: ClusterBook, change: IsrChange) -> None:
        broker = book.brokers.get(change.broker)
        if broker is None:
            broker = book.brokers[change.broker] = Broker(
                change.cluster, change.broker, {}, None, self.origin, self.origin
            )
        broker.pending[(change.topic, change.partition)] = change.decided
        if broker.first_change_ts is None:
            broker.first_change_ts = change.ts
        broker.last_isr_change_ms = change.ts

    def _deadline(self, book: ClusterBook) -> int:
        """When the first pending broker may send its batch (INF: nothing pending)."""
        c = self.config
        return min(
            (
                min(b.last_isr_change_ms + c.isr_change_linger_ms, b.last_propagation_ms + c.isr_change_max_delay_ms)
                for b in book.brokers.values()
                if b.pending
            ),
            default=INF,
        )

    def _run_checks_before(self, book: ClusterBook, limit: int, out: list[Propagation]) -> None:
        """Run the scheduled checks before `limit`, jumping over the ones that cannot emit anything."""
        while (deadline := self._deadline(book)) < INF:
            at = max(book.next_check, first_at_or_after(deadline + 1, self.origin, self.interval))
            if at >= limit:
                break
            self._check(book, at, out)
            book.next_check = at + self.interval
        book.next_check = max(book.next_check, first_at_or_after(limit, self.origin, self.interval))

    def _tick(self, book: ClusterBook, tick: PropagationTick, out: list[Propagation]) -> None:
        """An explicit run: the cluster's, or one broker's (the agent's tick). A broker the model has not seen yet
        starts from the throttle state its run reported; so does a broker that restarted since the model's last
        view of it: Kafka keeps the pending set in memory (ReplicaManager's `isrChangeSet`), so a crash loses it,
        and a new broker starts both times at its start, which its first runs report. Every run of a broker that
        reports its throttle is judged on the broker's own clocks (`_propagate`)."""
        if tick.broker is None or tick.last_propagation_ms is None:
            self._check(book, tick.ts, out, tick.broker)
            return
        known = book.brokers.get(tick.broker)
        propagated, changed = tick.last_propagation_ms, tick.last_isr_change_ms
        if known is None:
            known = book.brokers[tick.broker] = Broker(
                book.cluster, tick.broker, {}, None, propagated if changed is None else changed, propagated
            )
        elif changed == propagated < tick.ts and propagated > known.last_propagation_ms:
            _restart(known, propagated)
        if known.pending:
            # A stamp at or after the run's clock is of a write that committed after the run read its clocks.
            self._propagate(known, tick.ts, out, changed if changed is not None and changed < tick.ts else None)
        # The report is the state after the run: whether the broker sent a batch at it, whatever the model did.
        known.last_propagation_ms = propagated

    def _check(self, book: ClusterBook, now: int, out: list[Propagation], only: int | None = None) -> None:
        """ReplicaManager.maybePropagateIsrChanges at `now` for every broker of the cluster (or only `only`)."""
        for _, broker in sorted(book.brokers.items()):
            if broker.pending and only in (None, broker.broker):
                self._propagate(broker, now, out)

    def _propagate(self, broker: Broker, now: int, out: list[Propagation], committed: int | None = None) -> None:
        """ZkAlterPartitionManager.maybePropagateIsrChanges (3.9 L99-109) for one broker at `now`.

        `committed`: the lastIsrChangeMs the broker's run reported. Kafka stamps it when a write commits (L78), a
        write's latency after the model's decision, so the broker's stamp replaces the model's; and a change the
        model decided after it is a write still in flight at the run: not in Kafka's isrChangeSet yet (L74-79), it
        waits for the next batch."""
        c = self.config
        ready, waiting = broker.pending, {}
        last_change = broker.last_isr_change_ms
        if committed is not None:
            ready = {tp: at for tp, at in broker.pending.items() if at <= committed}
            waiting = {tp: at for tp, at in broker.pending.items() if at > committed}
            last_change = committed
        quiet = last_change + c.isr_change_linger_ms < now
        overdue = broker.last_propagation_ms + c.isr_change_max_delay_ms < now
        if ready and (quiet or overdue):
            out.append(
                Propagation(
                    ts=now,
                    cluster=broker.cluster,
                    broker=broker.broker,
                    partitions=_partitions(ready),
                    trigger=Trigger.LINGER if quiet else Trigger.MAX_DELAY,
                    first_change_ts=broker.first_change_ts,
                    last_change_ts=last_change,
                )
            )
            broker.pending = waiting
            broker.first_change_ts = min(waiting.values(), default=None)
            broker.last_propagation_ms = now
        if committed is not None:
            broker.last_isr_change_ms = max([committed, *waiting.values()])


class _Buffered(Protocol):
    @property
    def cluster(self) -> str: ...
    @property
    def ts(self) -> int: ...


class _TimedBook(Protocol):
    applied_until: int
    buffer: list[Any]


def buffer_in_time(items: Iterable[_Buffered], book_of: Callable[[str], _TimedBook]) -> int:
    """Buffer each item in its cluster's book (`book_of`); returns how many were too late: before what their
    cluster already applied (SPEC §6). The propagation book and the AlterPartition managers share it."""
    late = 0
    for item in items:
        book = book_of(item.cluster)
        if item.ts < book.applied_until:
            late += 1
        else:
            book.buffer.append(item)
    return late


def _restart(broker: Broker, started: int) -> None:
    """A broker that restarted at `started`: the changes of its previous run are gone with its memory; those of
    the new run (after `started`) stay."""
    broker.pending = {tp: ts for tp, ts in broker.pending.items() if ts > started}
    broker.first_change_ts = min(broker.pending.values(), default=None)
    broker.last_isr_change_ms = max([started, *broker.pending.values()])
    broker.last_propagation_ms = started


def _partitions(pending: dict[tuple[str, int], int]) -> list[TopicPartition]:
    return [TopicPartition(t, p) for t, p in sorted(pending)]
