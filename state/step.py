"""One batch step: advance the partition engines and the propagation book, and collect what that settled.

The replay (one step over everything), the streaming sink (one step per micro-batch, fed by the state
keys' reports), the Spark replay's finish and the tests all run this, so what a step outputs and how
it counts is written once: decisions, propagation batches, partition records, the brokers' throttle
state, what brokers observably did and where the model disagrees with it (the audit), dead letters, and
the counters the store keeps as cumulative metrics (`ignored_fetches.<reason>`, `ignored_appends.<reason>`,
`ignored_leader_and_isr.<reason>`, `ignored_ticks.<reason>`, `dead_letters.<category>`, `late_events`: each a
counter of `state.metrics`, carried under one name from the rule that counts it to /metrics).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec
from msgspec.structs import replace

from .alter_partition import AlterPartitionBook
from .audit import Audit, sorted_divergences
from .clock import ClockBook
from .events import BrokerObserved, BrokerRegistration, DeadLetter, IsrUpdated, Observed
from .incidents import Incident, IncidentBook, Timeline
from .metrics import DEAD_LETTERS, IGNORED_ALTER_PARTITION_ANSWERS, LATE_EVENTS, counter_key
from .propagation import PropagationBook
from .records import (
    AlterPartitionAnswer,
    AlterPartitionItem,
    AlterPartitionRequest,
    AlterPartitionSendSeen,
    AlterPartitionSubmit,
    BrokerRecord,
    Decision,
    Divergence,
    IsrChange,
    IsrCommitted,
    IsrWrite,
    Observation,
    PartitionHealth,
    PartitionRecord,
    Propagation,
    PropagationTick,
    ProposedIsr,
)


class StepOutputs(Protocol):
    """What one state key's advance produced: an `Outputs`, or the report that carried it across Spark."""

    @property
    def decisions(self) -> list[Decision]: ...
    @property
    def changes(self) -> list[IsrChange]: ...
    @property
    def ticks(self) -> list[PropagationTick]: ...
    @property
    def counters(self) -> Mapping[str, int]: ...
    @property
    def writes(self) -> list[IsrWrite]: ...
    @property
    def observed(self) -> list[Observation | BrokerObserved]: ...
    @property
    def alter_partition(self) -> list[AlterPartitionSubmit | AlterPartitionAnswer | AlterPartitionSendSeen]: ...
    @property
    def states(self) -> list[PartitionHealth]: ...
    @property
    def registrations(self) -> list[BrokerRegistration]: ...
    @property
    def resyncs(self) -> list[tuple[str, str, int, int]]: ...


@dataclass
class Settled:
    """The outputs of a step, ready for the store, the files or a test.

    `frontiers`: each cluster's time up to which they are final (its event time, SPEC §6); `watermark`: the
    newest of those, the stream's "now" as one number.
    """

    decisions: list[Decision] = field(default_factory=list)
    propagations: list[Propagation] = field(default_factory=list)
    alter_partitions: list[AlterPartitionRequest] = field(default_factory=list)  # the requests answered (§4.9)
    records: list[PartitionRecord] = field(default_factory=list)
    brokers: list[BrokerRecord] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    observed: list[Observed] = field(default_factory=list)
    divergences: list[Divergence] = field(default_factory=list)
    counters: Counter[str] = field(default_factory=Counter)
    watermark: int | None = None
    frontiers: dict[str, int] = field(default_factory=dict)
    as_of: dict[tuple[str, str, int], int] = field(default_factory=dict)  # event time each record is exact at
    incidents: list[Incident] = field(default_factory=list)  # every incident the step opened or changed, as it is now
    opened: list[Incident] = field(default_factory=list)  # those it opened
    timeline: Timeline = field(default_factory=Timeline)
    committed: list[IsrCommitted] = field(default_factory=list)  # the leaders' ISR changes that committed (SPEC §8)
    partitions_written: int | None = None  # rows the executors wrote in place of `records` (the stream: SPEC §5)

    def add_dead_letters(self, dead: Iterable[DeadLetter]) -> None:
        for d in dead:
            self.dead_letters.append(d)
            self.counters[counter_key(DEAD_LETTERS, d.category)] += 1


def settle(
    book: PropagationBook,
    outputs: Iterable[StepOutputs],
    until: int | Mapping[str, int] | None,
    audit: Audit | None = None,
    managers: AlterPartitionBook | None = None,
    clocks: ClockBook | None = None,
    incidents: IncidentBook | None = None,
    judged: Sequence[Divergence] | None = None,
) -> Settled:
    """Fold state keys' outputs into one step: the ISR changes and ticks go to the brokers' propagation
    book, which advances to `until` (one time, or one per cluster; None: the book only buffers); the model's
    ISR writes and batches and the brokers' observed writes go to the `audit`, which advances likewise; the
    leaders' AlterPartition proposals and answers go to their brokers' `managers`, likewise. The broker records
    carry the reporting brokers' clock offsets from `clocks`. The decisions and the partitions' health go to the
    `incidents` book with the step's requests, brokers, divergences and batches, likewise (SPEC §8). `judged`: the
    ISR divergences the state keys judged of their own partitions (`Audit.pair`); then the `audit` takes only the
    batches (a one-pass replay pairs the writes here)."""
    settled = Settled()
    counters = settled.counters
    managers = AlterPartitionBook() if managers is None else managers
    proposals: list[AlterPartitionSubmit | AlterPartitionAnswer | AlterPartitionSendSeen] = []
    items: list[IsrChange | PropagationTick] = []
    writes: list[IsrWrite] = []
    observed: list[Observation | BrokerObserved] = []
    states: list[PartitionHealth] = []
    registrations: list[BrokerRegistration] = []
    resyncs: list[tuple[str, str, int, int]] = []
    for out in outputs:
        settled.decisions.extend(out.decisions)
        items.extend(out.changes)
        items.extend(out.ticks)
        writes.extend(out.writes)
        observed.extend(out.observed)
        proposals.extend(out.alter_partition)
        states.extend(out.states)
        registrations.extend(out.registrations)
        resyncs.extend(out.resyncs)
        counters.update(out.counters)
    counters[LATE_EVENTS.tally] += book.add(items) + managers.add(proposals)
    # What brokers did, as they reported it: a proposal observed for the audit is its request's, recorded once.
    settled.observed = [_reported(o) for o in observed if not _is_proposal(o)]
    divergences: list[Divergence] = []
    if judged is not None:
        divergences = list(judged)
    if audit is not None:
        divergences += audit.add(writes, observed, resyncs=resyncs, pair=judged is None)
    if until is not None:
        settled.propagations = book.advance(until)
        settled.alter_partitions = managers.advance(until)
        for reason, count in managers.ignored.items():
            counters[counter_key(IGNORED_ALTER_PARTITION_ANSWERS, reason)] += count
        managers.ignored.clear()
        clusters = {c: until for c in book.clusters} if isinstance(until, int) else dict(until)
        settled.frontiers = clusters
        settled.watermark = until if isinstance(until, int) else max(until.values(), default=None)
        if audit is not None:
            divergences += audit.add(batches=settled.propagations)
            divergences += audit.advance(until)
    settled.divergences = sorted_divergences(divergences)
    settled.brokers = brokers_view(book, managers, clocks)
    if incidents is not None:
        incidents.add(settled.decisions, states, registrations)
        if until is not None:
            frontiers = dict(until) if not isinstance(until, int) else {c: until for c in incidents.clusters(book)}
            settled.opened, settled.incidents, settled.timeline, settled.committed = incidents.advance(
                frontiers, settled.alter_partitions, settled.brokers, settled.divergences, settled.propagations
            )
    return settled


def _snapshot(value: Any, kind: Any) -> Any:
    """A copy of the manager's live structs: its request's items change as their answers come."""
    return msgspec.msgpack.decode(msgspec.msgpack.encode(value), type=kind)


def brokers_view(
    book: PropagationBook, managers: AlterPartitionBook, clocks: ClockBook | None = None
) -> list[BrokerRecord]:
    """Every broker's record: its propagation throttle, when it proposes with AlterPartition its manager, and when it
    reports its events its clock offset. One record per broker, so a broker that leads nothing has one too."""
    records = {(b.cluster, b.broker): b for b in book.brokers_view()}
    for manager, now in managers.managers():
        key = (manager.cluster, manager.broker)
        record = records.get(key) or _idle(book, *key)
        request = manager.in_flight
        records[key] = replace(
            record,
            queue=_snapshot(manager.queue, list[AlterPartitionItem]),
            in_flight=_snapshot(request, AlterPartitionRequest | None),
            in_flight_age_ms=None if request is None else now - request.sent_ms,
        )
    for key, offset in (clocks.offsets() if clocks is not None else {}).items():
        records[key] = replace(records.get(key) or _idle(book, *key), clock_offset_ms=offset)
    return [records[key] for key in sorted(records)]


def _idle(book: PropagationBook, cluster: str, broker: int) -> BrokerRecord:
    """The record of a broker the propagation book has no state of: nothing pending, its throttle at the origin."""
    return BrokerRecord(
        cluster=cluster,
        broker=broker,
        pending=[],
        first_change_ts=None,
        last_isr_change_ms=book.origin,
        last_propagation_ms=book.origin,
    )


def by_reason(counters: Mapping[str, int], name: str) -> dict[str, int]:
    """The `name.<reason>` counters as {reason: count}, sorted, zeros left out."""
    prefix = name + "."
    return dict(sorted((k[len(prefix) :], v) for k, v in counters.items() if v and k.startswith(prefix)))


def summarize(settled: Settled, partitions: int, book: PropagationBook, audit_pending: int) -> dict[str, Any]:
    """The counts every replay summary carries (summary.json), from a settled step over the whole input."""
    decisions, propagations, counters = settled.decisions, settled.propagations, settled.counters
    return {
        "decisions": len(decisions),
        "decisions_by_kind": dict(sorted(Counter(str(d.kind) for d in decisions).items())),
        "shrinks_by_reason": dict(sorted(Counter(str(r) for d in decisions for r in d.reasons.values()).items())),
        "propagations": len(propagations),
        "propagations_by_trigger": dict(sorted(Counter(str(p.trigger) for p in propagations).items())),
        "partitions": partitions,
        "ignored_fetches_by_reason": by_reason(counters, "ignored_fetches"),
        "ignored_appends_by_reason": by_reason(counters, "ignored_appends"),
        "dead_letters": len(settled.dead_letters),
        "dead_letters_by_reason": by_reason(counters, "dead_letters"),
        "partitions_pending_propagation": book.pending_partitions(),
        "ignored_leader_and_isr_by_reason": by_reason(counters, "ignored_leader_and_isr"),
        "ignored_ticks_by_reason": by_reason(counters, "ignored_ticks"),
        "observed_by_type": dict(sorted(Counter(type(o).__name__ for o in settled.observed).items())),
        "divergences_by_kind": dict(sorted(Counter(str(d.kind) for d in settled.divergences).items())),
        "audit_pending": audit_pending,
        **alter_partition_summary(settled),
    }


def _is_proposal(o: Observation | BrokerObserved) -> bool:
    return isinstance(o, Observation) and isinstance(o.event, ProposedIsr)


def _reported(o: Observation | BrokerObserved) -> Observed:
    if not isinstance(o, Observation):
        return o
    assert isinstance(o.event, IsrUpdated), "a proposal is recorded as its request"
    return o.event


def alter_partition_summary(settled: Settled) -> dict[str, Any]:
    """The AlterPartition counts of a summary, when some leader proposed with it (none: ZooKeeper mode's keys only)."""
    names = ("failed_isr_updates", "ignored_alter_partition_responses", "ignored_alter_partition_answers")
    if not settled.alter_partitions and not any(by_reason(settled.counters, name) for name in names):
        return {}
    return {
        "alter_partition_requests": len(settled.alter_partitions),
        "alter_partition_errors": dict(
            sorted(Counter(i.error for r in settled.alter_partitions for i in r.partitions if i.error).items())
        ),
        **{f"{name}_by_reason": by_reason(settled.counters, name) for name in names},
    }
