"""The partition engine: one state key's partitions, advanced "up to W" in event time (SPEC §4, §6).

Events may arrive in any order and in any cut; the engine buffers them and applies them with one scheduler
(`PartitionEngine.advance`), in (ts, seq, arrival) order with scheduled isr-expiration checks interleaved: everything
strictly before W, the cluster's frontier, and past W each partition up to its own frontier. Whatever the cut, the
outputs equal those of one pass over all events.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any, cast

import msgspec
from msgspec import Struct
from msgspec.structs import replace

from .config import Config, ConfigError, isr_protocol, kafka_rules
from .events import (
    AlterPartitionResponse,
    AlterPartitionSent,
    Append,
    BrokerRegistration,
    Event,
    Fetch,
    IsrChangePropagated,
    IsrUpdated,
    LeaderAndIsr,
    Tick,
    Watermark,
    sorts_at,
)
from .metrics import IGNORED_TICKS
from .order import Half, Order
from .paged import Page, Partitions
from .partition import (
    NO_METADATA,
    Metadata,
    Outputs,
    Partition,
    PartitionKey,
    Registration,
    acting_brokers,
    append_to_leader,
    become_leader_or_follower,
    caught_up_repeat,
    commit_isr_write,
    follower_copy,
    forget_partition,
    handle_alter_partition_response,
    leader_reports_writes,
    maybe_shrink_isr,
    next_shrink_eligible_at,
    observe_alter_partition_sent,
    partition_health,
    partition_record,
    removed_by_controller,
    restarted,
    tick_checks,
    update_follower_fetch_state,
)
from .records import DecisionKind, PartitionRecord, PropagationTick
from .schedule import INF, first_at_or_after

# 3: a partition's AlterPartition items are held by brokers; registrations as each broker has them. 4: partitions in
# pages (`paged.Page`), decoded only when a call touches them. 5: the deposed leaders and the runs checked ahead kept by
# the engine (only the scheduler and the frontier read them), not in each partition. Versions 3 and 4 are read.
STATE_VERSION = 5
_WHOLE = 3  # the version whose partitions are encoded in the state itself, one by one
_PAGED = 4  # the version whose pages and partitions still held `deposed` and `checked_ahead` (`_legacy_partitions`)


RegistrationRow = tuple[str, int, int, Registration]  # (cluster, reporter or leader, broker id, registration)
# How far past its cluster's frontier each partition may go (`PartitionEngine.advance`): its own frontier given the
# brokers acting on it (`PartitionEngine.acting_brokers`), and the furthest any goes.
Ahead = tuple[Callable[[frozenset[int]], int], int]


class _GroupState(Struct, array_like=True):
    version: int
    partitions: list[msgspec.Raw]  # `Page`s (`Partition`s in version 3)
    buffer: list[Event]
    applied_until: int
    next_check: int
    stale: bool
    next_eligible: int
    kafka_versions: list[tuple[str, int, str]]  # (cluster, broker, version) as each broker's agent reported it
    isr_protocols: list[tuple[str, int, str]] = []  # (cluster, broker, isr_protocol) likewise
    registrations: list[RegistrationRow] = []  # (cluster, reporter, broker id, its registration)
    last_seen: list[tuple[str, int, int]] = []  # (cluster, broker, ts of its last event with a seq)
    fenced: list[RegistrationRow] = []  # (cluster, leader, broker id, fenced): `Registrations.fence`
    deposed: list[tuple[str, str, int, tuple[int, ...]]] = []  # (cluster, topic, partition, its deposed leaders)
    checked_ahead: list[tuple[str, str, int, tuple[int, ...]]] = []  # (cluster, topic, partition, runs checked ahead)


class _PageV4(Struct, array_like=True):
    """A page as version 4 wrote it: with a flag for a run checked ahead in it."""

    count: int
    eligible: int
    checked_ahead: bool
    partitions: msgspec.Raw


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(_GroupState)
_page_decoder = msgspec.msgpack.Decoder(Page)
_legacy_page_decoder = msgspec.msgpack.Decoder(_PageV4)
_row_decoder = msgspec.msgpack.Decoder(list[Any])
_rows_decoder = msgspec.msgpack.Decoder(list[list[Any]])
# Where versions 3 and 4 kept `deposed` and `checked_ahead` in a partition: just before `shown`.
_LEGACY_AT = Partition.__struct_fields__.index("shown")


class Registrations:
    """The one owner of the KRaft registrations each leader has in its own metadata (SPEC §4.9): what each reporting
    broker reported (`broker_registration`; reporter -1: a cluster-wide source, which serves every leader that reports
    none), and the followers the controller removed that a leader's metadata has fenced until its source reports them
    again (`removed_by_controller`). A mark is kept apart from what was reported, so a leader whose source is the
    cluster-wide one keeps reading it."""

    def __init__(self) -> None:
        self.reported: dict[tuple[str, int], dict[int, Registration]] = {}
        self.fenced: dict[tuple[str, int], dict[int, Registration]] = {}

    def __bool__(self) -> bool:
        return bool(self.reported or self.fenced)

    def report(self, cluster: str, reporter: int, broker: int, registration: Registration) -> None:
        """`reporter`'s metadata has `broker` as `registration`; it ends the marks of the leaders that read it."""
        self.reported.setdefault((cluster, reporter), {})[broker] = registration
        for (c, leader), marks in list(self.fenced.items()):
            if c == cluster and broker in marks and self._source(cluster, leader) == reporter:
                del marks[broker]
                if not marks:
                    del self.fenced[(c, leader)]

    def fence(self, cluster: str, leader: int, replica: int) -> None:
        """`leader`'s metadata has `replica` fenced (its registration's epoch kept) until its source reports it."""
        known = self.of(cluster, leader).get(replica)
        self.fenced.setdefault((cluster, leader), {})[replica] = Registration(
            -1 if known is None else known.epoch, True, False
        )

    def of(self, cluster: str, leader: int | None) -> Metadata:
        """The registrations `leader` judges eligibility on: its own reports, else the cluster-wide ones, with its
        marks over them."""
        who = -1 if leader is None else leader
        base = self.reported.get((cluster, self._source(cluster, who)), NO_METADATA)
        marks = self.fenced.get((cluster, who))
        return {**base, **marks} if marks else base

    def _source(self, cluster: str, leader: int) -> int:
        """Whose reports `leader`'s metadata is: its own once it reported one, else the cluster-wide source's."""
        return leader if (cluster, leader) in self.reported else -1

    def rows(self) -> tuple[list[RegistrationRow], list[RegistrationRow]]:
        """The reported registrations and the marks, as rows (a state blob keeps them)."""
        return _rows(self.reported), _rows(self.fenced)

    def load(self, reported: list[RegistrationRow], fenced: list[RegistrationRow]) -> None:
        """Take the rows `rows` gave."""
        for table, rows in ((self.reported, reported), (self.fenced, fenced)):
            for c, who, b, r in rows:
                table.setdefault((c, who), {})[b] = r


def _rows(table: dict[tuple[str, int], dict[int, Registration]]) -> list[RegistrationRow]:
    return [(c, who, b, r) for (c, who), regs in table.items() for b, r in regs.items()]


def _order(ev: Event) -> tuple[int, int, int]:
    """An input event's place among events: (time it sorts at, seq, arrival); parse_event always sets seq."""
    return (sorts_at(ev), ev.seq or 0, ev.arrival)


class PartitionEngine:
    """The replica state of a set of partitions plus the events not yet applied.

    `owns_ticks`: whether what a tick produces once per stream comes from here: its propagation half, passed on,
    the count of a version it does not take, and the AlterPartition requests brokers report (which reach every
    key too). Ticks reach every state key, and exactly one of them owns them.
    """

    def __init__(self, config: Config, blob: bytes | None = None, owns_ticks: bool = True) -> None:
        self.config = config
        self.lag = config.replica_lag_time_max_ms
        self.interval = config.expiration_interval_ms
        self.origin = config.schedule_origin_ms
        self.owns_ticks = owns_ticks
        self.partitions = Partitions()
        self.buffer: list[Event] = []
        self.applied_until = -INF
        self.next_check = first_at_or_after(self.origin, self.origin, self.interval)
        # When `stale` is False, `next_eligible` is exact for the current state: the earliest time an
        # isr-expiration check could remove anyone. It lets checks that cannot change anything be skipped.
        self.stale = False
        self.next_eligible = INF
        # The Kafka version each broker reported on its ticks (the agent): the partitions it leads follow its rules.
        self.kafka_versions: dict[tuple[str, int], str] = {}
        self.isr_protocols: dict[tuple[str, int], str] = {}  # likewise, how each broker writes its ISR (SPEC §2)
        # The leaders' KRaft metadata about each broker (SPEC §4.9): each judges eligibility on its own (`metadata_of`).
        self.registrations = Registrations()
        # The time of each reporting broker's last event here: a later event of a new run of it is a restart.
        self.last_seen: dict[tuple[str, int], int] = {}
        # The leaders a new state moved each partition away from that have not reported that state yet (`_depose`):
        # until they do, each may still report as its leader (its Partition is the leader's until it applies the
        # change), so its stream still acts on the partition (`acting_brokers`). Only the frontier reads it.
        self.deposed: dict[PartitionKey, tuple[int, ...]] = {}
        # The starts of a leader's isr-expiration runs whose share a partition took past its cluster's frontier
        # (`_check_ahead`): when that tick is applied to the rest, it does not check the partition again.
        self.checked_ahead: dict[PartitionKey, tuple[int, ...]] = {}
        self._configs: dict[tuple[str, str], Config] = {(config.kafka_version, config.isr_protocol): config}
        if blob is not None:
            state = _decoder.decode(blob)
            if state.version not in (_WHOLE, _PAGED, STATE_VERSION):
                raise ValueError(f"partition state version {state.version} is not {STATE_VERSION}")
            if state.version == STATE_VERSION:
                self.partitions = Partitions([_page_decoder.decode(raw) for raw in state.partitions])
                self.deposed = {(c, t, n): d for c, t, n, d in state.deposed}
                self.checked_ahead = {(c, t, n): runs for c, t, n, runs in state.checked_ahead}
            else:
                self.partitions = Partitions(whole=self._legacy_partitions(state))
            self.buffer = state.buffer
            self.applied_until = state.applied_until
            self.next_check = state.next_check
            self.stale = state.stale
            self.next_eligible = state.next_eligible
            self.kafka_versions = {(c, b): v for c, b, v in state.kafka_versions}
            self.isr_protocols = {(c, b): v for c, b, v in state.isr_protocols}
            self.registrations.load(state.registrations, state.fenced)
            self.last_seen = {(c, b): ts for c, b, ts in state.last_seen}

    def to_bytes(self) -> bytes:
        """The compact serialised form (msgpack, version first) a Spark state row keeps."""
        reported, fenced = self.registrations.rows()
        return _encoder.encode(
            _GroupState(
                STATE_VERSION,
                cast("list[msgspec.Raw]", self.partitions.pages(self.lag)),
                self.buffer,
                self.applied_until,
                self.next_check,
                self.stale,
                self.next_eligible,
                [(c, b, v) for (c, b), v in self.kafka_versions.items()],
                [(c, b, v) for (c, b), v in self.isr_protocols.items()],
                reported,
                [(c, b, ts) for (c, b), ts in self.last_seen.items()],
                fenced,
                [(c, t, n, d) for (c, t, n), d in self.deposed.items()],
                [(c, t, n, runs) for (c, t, n), runs in self.checked_ahead.items()],
            )
        )

    def _legacy_partitions(self, state: _GroupState) -> Iterator[Partition]:
        """The partitions of a version 3 (one by one) or 4 (in pages) state, whose partitions held their deposed
        leaders and runs checked ahead (at `_LEGACY_AT`): those go to the engine."""
        if state.version == _WHOLE:
            rows = [_row_decoder.decode(raw) for raw in state.partitions]
        else:
            pages = (_legacy_page_decoder.decode(raw) for raw in state.partitions)
            rows = [row for page in pages for row in _rows_decoder.decode(page.partitions)]
        for row in rows:
            kept = row[_LEGACY_AT : _LEGACY_AT + 2]  # none in a partition written before they were
            del row[_LEGACY_AT : _LEGACY_AT + 2]
            p = msgspec.convert(row, Partition)
            for table, runs in zip((self.deposed, self.checked_ahead), kept, strict=False):
                if runs:
                    table[p.key] = tuple(runs)
            yield p

    def add(self, events: list[Event]) -> int:
        """Buffer events; returns how many were late (before what was already applied) and dropped. A watermark
        changes no state (it bounds its broker's stream, SPEC §6): it is not buffered."""
        applied_until = self.applied_until
        stateful = [ev for ev in events if type(ev) is not Watermark]
        fresh = [ev for ev in stateful if sorts_at(ev) >= applied_until]
        self.buffer.extend(fresh)
        return len(stateful) - len(fresh)

    def advance(self, until: int, out: Outputs | None = None, ahead: Ahead | None = None) -> Outputs:
        """The one scheduler (SPEC §6): apply the buffered events in (ts, seq, arrival) order, each once it is before
        the frontier of every partition it reads or changes and nothing before it that changes those waits, with the
        scheduled isr-expiration checks interleaved. `until` is the cluster's frontier, every partition's at least:
        everything before it goes, in order. `ahead` (`of(p)`: a partition's own frontier, at or past `until`;
        `limit`: the furthest any goes) lets each partition go on to its own: its own events (`_PARTITION_LOCAL`) go
        while it is behind its frontier and nothing of it waits; a broker's tick goes once every partition it leads
        does, or, keeping its rules, each that goes takes its share of the run (`checked_ahead`), unless a partition
        state that waits moves a leadership to or from it; any other event waits, holding back what it changes
        (`_holds_back`); a new run of a broker, an event that may change any partition and a scheduled check (it reads
        them all) stop everything behind them. Without `ahead` every partition's frontier is `until`. `out.ahead`:
        per partition applied past `until`, the time of its last event so (at or behind it, a later event of it is
        late: `frontier.behind_partition`), and `out.exact` the event time its state is exact at."""
        out = out or Outputs()
        buf = self.buffer
        buf.sort(key=_order)
        cluster = max(until, self.applied_until)
        moved = cluster > self.applied_until
        scheduled = self.interval > 0
        frontier_of, limit = ahead if ahead is not None else (None, cluster)
        partitions = self.partitions
        waiting: dict[PartitionKey, int] = {}  # a partition's first event that waits, or its wait's cause, at
        led: dict[tuple[str, int | None], int] = {}  # a broker whose partitions wait: its rules or metadata, at
        moving: set[tuple[str, int | None]] = set()  # the brokers a partition state that waits moves a leadership of
        frontiers: dict[PartitionKey, int] = {}
        applied: dict[PartitionKey, int] = {}  # a partition applied past the cluster's frontier: its last event, at
        kept: list[Event] = []
        past = False  # the walk is past the cluster's frontier

        def goes(p: Partition, at: int) -> bool:
            """Whether `p` takes an event at `at` now: nothing of it waits, and its own frontier is past `at`."""
            if p.key in waiting or (p.cluster, p.leader) in led:
                return False
            f = frontiers.get(p.key)
            if f is None:
                f = frontiers[p.key] = cluster if frontier_of is None else frontier_of(self.acting_brokers(p))
            return at < f

        for i, ev in enumerate(buf):
            at = sorts_at(ev)
            if at < cluster:  # before every partition's frontier: nothing before it waits
                if scheduled and self.next_check < at:
                    self._run_checks_before(at, out)
                self._apply(ev, out)
                continue
            if not past:
                past = True
                if scheduled and moved:
                    self._run_checks_before(cluster, out)
                if scheduled:
                    limit = min(limit, self.next_check)  # the next check reads every partition: none goes past it
            if at >= limit or self._restarts(ev):
                kept += buf[i:]
                limit = at
                break
            if type(ev) in _PARTITION_LOCAL:
                key = (ev.cluster, ev.topic, ev.partition)  # type: ignore[union-attr]
                p = partitions.get(key)
                if p is not None and goes(p, at):
                    self._apply(ev, out)
                    applied[key] = at
                    frontiers.pop(key)  # it may have changed who acts on it
                    continue
                waiting.setdefault(key, at)
            elif type(ev) is Tick and ev.broker is not None and (ev.cluster, ev.broker) not in moving | led.keys():
                # A broker's tick reads the partitions it leads (an isr-expiration run) and tells its rules: it goes
                # with them all; keeping its rules, each partition that goes takes its share of the run.
                mine = partitions.led_by(ev.cluster, ev.broker)
                gone = [p for p in mine if goes(p, at)]
                keeps = self._keeps_rules(ev)
                if len(gone) == len(mine) or (keeps and ev.task == "isr-change-propagation"):
                    self._apply(ev, out)
                    for p in gone:  # a propagation-only tick reads none: those held back did not pass `at`
                        applied[p.key] = at
                        frontiers.pop(p.key, None)
                    continue
                if not keeps:
                    led.setdefault((ev.cluster, ev.broker), at)
                    kept.append(ev)
                    continue
                took = {p.key for p in gone} if ev.task in (None, "isr-expiration") else set()
                for p in mine:
                    if p.key in took:
                        self._check_ahead(p, ev, out)
                        applied[p.key] = at
                        frontiers.pop(p.key)
                    else:
                        waiting.setdefault(p.key, at)
            else:
                held = _holds_back(ev)
                if held is None:
                    kept += buf[i:]
                    limit = at
                    break
                for key in held[0]:
                    waiting.setdefault(key, at)
                if type(ev) is LeaderAndIsr:
                    moved_p = partitions.get((ev.cluster, ev.topic, ev.partition))
                    moving.update({(ev.cluster, ev.leader), (ev.cluster, None if moved_p is None else moved_p.leader)})
                for broker in held[1]:
                    led.setdefault(broker, at)
            kept.append(ev)
        if scheduled and moved and not past:
            self._run_checks_before(cluster, out)
        self.buffer = kept
        self.applied_until = cluster
        for key, at in applied.items():
            p = partitions[key]
            f = cluster if frontier_of is None else frontier_of(self.acting_brokers(p))
            out.ahead[key] = at
            out.exact[key] = max(min(f, limit, waiting.get(key, limit), led.get((p.cluster, p.leader), limit)), cluster)
        return out

    def _note_states(
        self,
        out: Outputs,
        mark: int,
        commit: AlterPartitionResponse | IsrUpdated | None = None,
        leader_before: int | None = None,
    ) -> None:
        """The health of each partition a decision since `mark` (or `commit`) concerns, for the incident book: a few per
        ISR change, never one per fetch (`partition_health`). `leader_before`: a LeaderAndIsr's partition's leader."""
        at: dict[PartitionKey, int] = {}
        for d in out.decisions[mark:]:
            if d.kind is not DecisionKind.REJECTED:
                at[(d.cluster, d.topic, d.partition)] = d.ts
        if commit is not None:
            at[(commit.cluster, commit.topic, commit.partition)] = commit.ts
        for key, ts in at.items():
            p = self.partitions.get(key)
            if p is not None:
                out.states.append(partition_health(p, ts, self._leader_config(p), leader_before))

    def _apply(self, ev: Event, out: Outputs) -> None:
        """Apply one input event (or explicit tick) at its place in event time, and note the health of what its
        decisions or commit changed (`_note_states`)."""
        partitions = self.partitions
        config = self.config
        mark = len(out.decisions)
        versions, protocols = self.kafka_versions, self.isr_protocols  # either: some broker has its own rules
        if ev.broker is not None and ev.seq is not None:
            self._saw(ev.cluster, ev.broker, ev.seq, ev.ts)
        if type(ev) is Fetch:
            p = partitions.get((ev.cluster, ev.topic, ev.partition))
            leader_config = self._leader_config(p) if versions or protocols else config
            update_follower_fetch_state(p, ev, leader_config, out, self.metadata_of(p))
            if len(out.decisions) > mark:  # an expand
                self._note_states(out, mark)
        elif type(ev) is Append:
            p = partitions.get((ev.cluster, ev.topic, ev.partition))
            leader_config = self._leader_config(p) if versions or protocols else config
            append_to_leader(p, ev, leader_config, out, self.metadata_of(p))
            if len(out.decisions) > mark:  # its check's shrink
                self._note_states(out, mark)
        elif type(ev) is LeaderAndIsr:
            key = (ev.cluster, ev.topic, ev.partition)
            p = partitions.get(key)
            if p is None:
                p = partitions[key] = Partition(sys.intern(ev.cluster), sys.intern(ev.topic), ev.partition)
            # The rules of the broker that takes the state: the new leader (an offline state: who reported it).
            broker = ev.leader if ev.leader >= 0 else ev.broker
            broker_config = self._broker_config(ev.cluster, broker) if versions or protocols else config
            before = (p.leader, p.leader_epoch, p.isr, p.isr_state, p.proposed_isr, p.partition_epoch)
            become_leader_or_follower(p, ev, broker_config, out, self.metadata_of(p, ev.leader))
            if (p.cluster, p.leader) in protocols:
                leader_reports_writes(p)
            for replica in removed_by_controller(p, *before):
                self.registrations.fence(p.cluster, ev.leader, replica)
            self._depose(p, ev, before[0])
            self._note_states(out, mark, leader_before=before[0])
        elif type(ev) is Tick:
            self._tick(ev, out)
            if len(out.decisions) > mark:  # its isr-expiration run's shrinks
                self._note_states(out, mark)
        elif type(ev) is AlterPartitionResponse:
            p = partitions.get((ev.cluster, ev.topic, ev.partition))
            leader_config = self._leader_config(p) if versions or protocols else config
            handle_alter_partition_response(p, ev, leader_config, out, self.metadata_of(p))
            self._note_states(out, mark, ev)
        elif type(ev) is BrokerRegistration:
            reporter = -1 if ev.broker is None else ev.broker
            registration = Registration(ev.epoch, ev.fenced, ev.in_controlled_shutdown)
            self.registrations.report(ev.cluster, reporter, ev.id, registration)
            if self.owns_ticks:  # every state key gets it; one passes it on (the incident book's fenced brokers)
                out.registrations.append(replace(ev, arrival=0))
        elif type(ev) is IsrUpdated:
            # What a broker did: recorded with the model's view, after it commits the model's write in flight.
            p = partitions.get((ev.cluster, ev.topic, ev.partition))
            leader_config = self._leader_config(p) if versions or protocols else config
            commit_isr_write(p, ev, leader_config, self.metadata_of(p))
            self._note_states(out, mark, ev)
            # An AlterPartition leader's write is a commit: the audit pairs its proposals (SPEC §7).
            out.observe(p, replace(ev, arrival=0), audited=not leader_config.alter_partition)
        elif type(ev) is AlterPartitionSent:
            # Every state key gets it (its partitions' proposals); the first one records it.
            observe_alter_partition_sent(partitions, ev, out, record=self.owns_ticks)
        elif type(ev) is IsrChangePropagated:
            out.observed.append(replace(ev, arrival=0))  # its input position is no part of the record
        self.stale = True

    def take_caught_up_repeat(self, ev: Fetch, out: Outputs) -> bool:
        """Apply a fetch that arrived behind the frontier when it is a caught-up repeat (`caught_up_repeat`); with
        scheduled checks (not the agent's explicit ticks) one may have read the follower meanwhile: never."""
        p = self.partitions.get((ev.cluster, ev.topic, ev.partition))
        if self.interval > 0 or not caught_up_repeat(p, ev):
            return False
        leader_config = self._leader_config(p) if self.kafka_versions or self.isr_protocols else self.config
        mark = len(out.decisions)
        update_follower_fetch_state(p, ev, leader_config, out, self.metadata_of(p))
        if len(out.decisions) > mark:
            self._note_states(out, mark)
        self.stale = True
        return True

    def _saw(self, cluster: str, broker: int, seq: int, ts: int) -> None:
        """A reporting broker's event: the first of a new run of it (`restarted`) forgets what its last run held."""
        key = (cluster, broker)
        last = self.last_seen.get(key)
        if restarted(seq, last):
            for p in self.partitions.values():
                if p.cluster == cluster:
                    forget_partition(p, broker)
            for pk, deposed in list(self.deposed.items()):  # its new run leads nothing until its metadata says so
                if pk[0] == cluster and broker in deposed:
                    self._set(self.deposed, pk, tuple(b for b in deposed if b != broker))
        if last is None or ts > last:  # an event applied ahead of its cluster's frontier may have come first
            self.last_seen[key] = ts

    def _depose(self, p: Partition, ev: LeaderAndIsr, leader_before: int | None) -> None:
        """A new state moved `p` away from its leader: the deposed leader acts on it until it reports that state or a
        later one (its follower's copy: ReplicaManager.makeFollowers ends its leadership; KRaft: applyDelta) or
        restarts (`_saw`), so its stream still holds the partition back (`acting_brokers`). Only the partition's own
        frontier reads this; it changes no decision and no record."""
        key, deposed = p.key, self.deposed.get(p.key, ())
        if follower_copy(ev):
            if ev.broker in deposed and ev.leader_epoch >= p.leader_epoch:
                self._set(self.deposed, key, tuple(b for b in deposed if b != ev.broker))
            return
        if leader_before is not None and leader_before >= 0 and p.leader != leader_before:
            deposed = tuple(sorted({*deposed, leader_before}))
        self._set(self.deposed, key, tuple(b for b in deposed if b != p.leader))

    @staticmethod
    def _set(table: dict[PartitionKey, tuple[int, ...]], key: PartitionKey, value: tuple[int, ...]) -> None:
        """`table[key] = value`, kept only while not empty (`deposed`, `checked_ahead`)."""
        if value:
            table[key] = value
        else:
            table.pop(key, None)

    def acting_brokers(self, p: Partition) -> frozenset[int]:
        """The brokers whose streams can still change `p` (`partition.acting_brokers`), with its deposed leaders."""
        acting = acting_brokers(p)
        deposed = self.deposed.get(p.key)
        return acting.union(deposed) if deposed else acting

    def _restarts(self, ev: Event) -> bool:
        """Whether `ev` is the first event of a new run of its broker (`restarted`)."""
        return ev.broker is not None and restarted(ev.seq, self.last_seen.get((ev.cluster, ev.broker)))

    def metadata_of(self, p: Partition | None, leader: int | None = None) -> Metadata:
        """The KRaft registrations `p`'s leader (or `leader`) has in its own metadata: Partition.isReplicaIsrEligible
        reads the leader's metadata cache (Partition@3.9.0-rc3 L1060-1093), which applies each change at its own
        moment: on the KRaft 4.4.0 lab a leader still had a restarted broker fenced 40 ms after two other brokers had
        it unfenced, and expanded only after. Registrations from a cluster-wide source (no reporter) serve a leader
        that reports none (`Registrations`)."""
        if p is None or not self.registrations:
            return NO_METADATA
        return self.registrations.of(p.cluster, p.leader if leader is None else leader)

    def record(self, p: Partition) -> PartitionRecord:
        """`p`'s SPEC §5 record under its leader's rule set: its flags read the min ISR its HW rule reads."""
        return partition_record(p, self._leader_config(p))

    def next_due(self) -> int:
        """The earliest event time at which advancing could change anything (INF: nothing pending).

        Spark uses it as the state key's event-time timeout; the sink uses it to know how far every
        key has settled.
        """
        due = min((sorts_at(ev) for ev in self.buffer), default=INF)
        if self.interval > 0:
            if self.stale:
                lag = self.lag
                self.next_eligible = min(
                    (next_shrink_eligible_at(p, lag) for p in self.partitions.values()), default=INF
                )
                self.stale = False
            due = min(due, max(self.next_check, first_at_or_after(self.next_eligible, self.origin, self.interval)))
        return due

    def _run_checks_before(self, limit: int, out: Outputs) -> None:
        """Run scheduled isr-expiration checks before `limit`, skipping those that cannot shrink anything."""
        while True:
            at = self.next_check
            if not self.stale:
                at = max(at, first_at_or_after(self.next_eligible, self.origin, self.interval))
            if at >= limit:
                break
            mark = len(out.decisions)
            self.next_eligible = self._check(at, out, None, Order.scheduled_expiration(at))
            if len(out.decisions) > mark:
                self._note_states(out, mark)
            self.stale = False
            self.next_check = at + self.interval
        if not self.stale:
            self.next_check = max(self.next_check, first_at_or_after(limit, self.origin, self.interval))

    def _broker_config(self, cluster: str, broker: int | None) -> Config:
        """The configuration `broker` runs with: the config's, with the Kafka version and ISR protocol it reported."""
        if broker is None:
            return self.config
        version = self.kafka_versions.get((cluster, broker), self.config.kafka_version)
        protocol = self.isr_protocols.get((cluster, broker), self.config.isr_protocol)
        config = self._configs.get((version, protocol))
        if config is None:
            config = self._configs[version, protocol] = self.config.for_broker(version, protocol)
        return config

    def _leader_config(self, p: Partition | None) -> Config:
        """The configuration of `p`'s leader (the config's for a partition not known yet)."""
        return self.config if p is None else self._broker_config(p.cluster, p.leader)

    def _check(
        self,
        now: int,
        out: Outputs,
        cluster: str | None,
        at: Order,
        broker: int | None = None,
        run_end_ms: int | None = None,
    ) -> int:
        """The isr-expiration task at `now` over every partition (of `cluster`; with `broker`, only the ones it
        leads: that broker's own run, which ended at `run_end_ms`); returns the next eligible time (of every
        partition, as the scheduled checks keep it: the pages it skips count theirs whatever `cluster` and `broker`)."""
        read, next_eligible = self.partitions.checked_at(now)
        taken = () if broker is None or cluster is None else self._shares_taken(cluster, broker, now)
        for p in read:
            if (cluster is None or p.cluster == cluster) and (broker is None or p.leader == broker) and p.hosted:
                if broker is not None:
                    if p.key in taken:  # its share of this run went past the cluster's frontier
                        continue
                    if not tick_checks(p, now, run_end_ms):
                        continue
                eligible = self._check_partition(p, now, out, at, run_end_ms)
                if eligible < next_eligible:
                    next_eligible = eligible
        return next_eligible

    def _shares_taken(self, cluster: str, broker: int, now: int) -> set[PartitionKey]:
        """The partitions of `broker` that took their share of its run at `now` past the cluster's frontier
        (`_check_ahead`): the run, applied to the rest, skips them, and they forget it."""
        partitions = self.partitions
        taken = {
            key for key, runs in self.checked_ahead.items()
            if key[0] == cluster and now in runs and partitions[key].leader == broker
        }  # fmt: skip
        for key in taken:
            self._set(self.checked_ahead, key, tuple(t for t in self.checked_ahead[key] if t != now))
        return taken

    def _check_partition(self, p: Partition, now: int, out: Outputs, at: Order, run_end_ms: int | None) -> int:
        """One partition's isr-expiration check at `now` under its leader's rules; returns its next eligible time."""
        config = self._leader_config(p) if self.kafka_versions or self.isr_protocols else self.config
        return maybe_shrink_isr(p, now, config, out, at, run_end_ms, self.metadata_of(p))

    def _check_ahead(self, p: Partition, tick: Tick, out: Outputs) -> None:
        """`p`'s share of its leader's isr-expiration run (`tick`), past the cluster's frontier: the tick, applied to
        the rest later, skips it (`checked_ahead`)."""
        if not p.hosted:
            return  # the run skips it, here and when the tick comes
        if tick_checks(p, tick.ts, tick.end_ms):
            mark = len(out.decisions)
            self._check_partition(p, tick.ts, out, Order.of_event(tick), tick.end_ms)
            if len(out.decisions) > mark:
                self._note_states(out, mark)
        self.checked_ahead[p.key] = (*self.checked_ahead.get(p.key, ()), tick.ts)

    def _keeps_rules(self, tick: Tick) -> bool:
        """Whether `tick` tells its broker's Kafka version and ISR protocol as they are (or not at all): then what
        its partitions read of their leader does not change at it."""
        key = (tick.cluster, -1 if tick.broker is None else tick.broker)
        return (tick.kafka_version is None or self.kafka_versions.get(key) == tick.kafka_version) and (
            tick.isr_protocol is None or self.isr_protocols.get(key) == tick.isr_protocol
        )

    def _take_kafka_version(self, tick: Tick, version: str, out: Outputs) -> None:
        """A broker's tick tells its Kafka version: the partitions it leads follow that rule set from now on. A version
        it cannot take (no broker, or not modelled) is counted, once per stream: by the key that owns the ticks."""
        if tick.broker is not None and _modelled(version):
            self.kafka_versions[(tick.cluster, tick.broker)] = version
        elif self.owns_ticks:
            refused = "kafka_version_without_broker" if tick.broker is None else "unsupported_kafka_version"
            out.count(IGNORED_TICKS, refused)

    def _take_isr_protocol(self, tick: Tick, protocol: str, out: Outputs) -> None:
        """A broker's tick tells how it writes its ISR (SPEC §2): the partitions it leads follow it from now on,
        unless its Kafka version cannot speak it."""
        if tick.broker is None:
            out.count(IGNORED_TICKS, "isr_protocol_without_broker")
            return
        try:
            isr_protocol(self.kafka_versions.get((tick.cluster, tick.broker), self.config.kafka_version), protocol)
        except ConfigError:
            out.count(IGNORED_TICKS, "unsupported_isr_protocol")
            return
        if (tick.cluster, tick.broker) not in self.isr_protocols:
            for p in self.partitions.led_by(tick.cluster, tick.broker):
                leader_reports_writes(p)
        self.isr_protocols[(tick.cluster, tick.broker)] = protocol

    def _tick(self, tick: Tick, out: Outputs) -> None:
        if tick.kafka_version is not None:
            self._take_kafka_version(tick, tick.kafka_version, out)
        if tick.isr_protocol is not None:
            self._take_isr_protocol(tick, tick.isr_protocol, out)
        if tick.task in (None, "isr-expiration"):
            self._check(tick.ts, out, tick.cluster, Order.of_event(tick), tick.broker, tick.end_ms)
        if tick.task in (None, "isr-change-propagation") and self.owns_ticks:
            out.ticks.append(
                PropagationTick(
                    *Order.of_event(tick, Half.PROPAGATION),
                    tick.cluster,
                    tick.broker,
                    tick.last_isr_change_ms,
                    tick.last_propagation_ms,
                )
            )


# The events that read only their partition and its leader's rules and metadata, and change only their partition (and
# outputs the sink orders): a fetch, an append (its check), an ISR write the leader reported, an AlterPartition answer.
# A partition state may change its leader (whose ticks read it) and its leader's metadata: it is not one of them.
_PARTITION_LOCAL = (Fetch, Append, IsrUpdated, AlterPartitionResponse)


def _holds_back(ev: Event) -> tuple[list[PartitionKey], list[tuple[str, int | None]]] | None:
    """What an event that is not `_PARTITION_LOCAL` changes, which waits for it (`PartitionEngine.advance`): the
    partitions it changes, and the brokers whose rules or metadata it changes (the partitions they lead read them);
    None: it may change any partition (an event without a reporting broker, a cluster-wide registration). A
    propagation a broker reported changes nothing of the model, and a follower's copy of a partition's state nothing
    an output reads (it may clear a deposed leader, which only the partition's frontier reads: late, it errs safe)."""
    cluster = ev.cluster
    if type(ev) is LeaderAndIsr:
        if follower_copy(ev):
            return [], []
        # and its leader's metadata (`removed_by_controller`)
        return [(cluster, ev.topic, ev.partition)], [(cluster, ev.leader)]
    if type(ev) is AlterPartitionSent:
        return [(cluster, item.topic, item.partition) for item in ev.partitions if item.topic is not None], []
    if type(ev) is IsrChangePropagated:
        return [], []
    if ev.broker is not None and (type(ev) is Tick or type(ev) is BrokerRegistration):
        return [], [(cluster, ev.broker)]
    return None


def _modelled(version: str) -> bool:
    """Whether isrwatch models this Kafka version (`config.kafka_rules`)."""
    try:
        kafka_rules(version)
    except ConfigError:
        return False
    return True
