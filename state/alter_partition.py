"""Per-broker AlterPartition managers (SPEC §4.9; Kafka's DefaultAlterPartitionManager).

A leader broker that proposes its ISR changes to the controller sends them through one manager: proposals wait in a
queue with one entry per partition, one request is in flight at a time, and when its answer arrives the next request
goes at once with everything queued meanwhile: no linger, no check interval, no max delay
(AlterPartitionManager@3.9.0-rc3 L142-180, L224-231; @4.3.1 L104-142). The partitions' own states (pending,
committed, reverted) live with the partitions (`state.partition`), and so does whether a manager holds a partition's
item (`Partition.held_by`, Kafka's `unsentIsrUpdates.putIfAbsent`); a manager only tells which proposals went in which
request, when, and what each got back. Like the propagation book, `AlterPartitionBook` is fed in any order and cut
and advances each cluster "up to W" in its own event time (SPEC §6), giving the requests of one pass.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

import msgspec
from msgspec import Struct

from .partition import restarted
from .propagation import buffer_in_time
from .records import (
    AlterPartitionAnswer,
    AlterPartitionItem,
    AlterPartitionRequest,
    AlterPartitionSendSeen,
    AlterPartitionSubmit,
)
from .schedule import INF

STATE_VERSION = 3  # 2: resends, and the brokers' reported sends; 3: what those carried

Item = AlterPartitionSubmit | AlterPartitionAnswer | AlterPartitionSendSeen


class Manager(Struct, array_like=True):
    """One broker's DefaultAlterPartitionManager: `unsentIsrUpdates` (the queue, in the order submitted) and the
    request in flight (`inflightRequest`)."""

    cluster: str
    broker: int
    queue: list[AlterPartitionItem]
    in_flight: AlterPartitionRequest | None = None
    resend_at: int | None = None  # the scheduled "send-alter-partition" after a top-level error (`resend_after`)
    reports_sends: bool = False  # the agent reports this broker's requests (`alter_partition_sent`)
    handling: bool = False  # its last response is being handled: the next request waits (`send_when_handled`)
    last_ts: int | None = None  # its broker's last item: a later one of a new run is a restart (`restarted`)
    handled_by: int | None = None  # when the handling of its last response ends at the latest (`handled_within`)


class ClusterManagers(Struct, array_like=True):
    """One cluster's managers and the proposals and answers not yet applied, settled up to `applied_until`."""

    cluster: str
    brokers: dict[int, Manager]
    buffer: list[Item]
    applied_until: int


_decoder = msgspec.msgpack.Decoder(tuple[int, list[ClusterManagers]])  # (STATE_VERSION, clusters)


class AlterPartitionBook:
    """All brokers' AlterPartition managers, each cluster advanced in its own event time."""

    def __init__(self, blob: bytes | None = None) -> None:
        # Answers for which no request of the broker awaits (`ignored_alter_partition_answers.<reason>`).
        self.ignored: Counter[str] = Counter()
        version, clusters = (STATE_VERSION, []) if blob is None else _decoder.decode(blob)
        if version != STATE_VERSION:
            raise ValueError(f"alter-partition state version {version} is not {STATE_VERSION}")
        self.clusters = {c.cluster: c for c in clusters}

    def to_bytes(self) -> bytes:
        return msgspec.msgpack.encode((STATE_VERSION, list(self.clusters.values())))

    def _cluster(self, name: str) -> ClusterManagers:
        managers = self.clusters.get(name)
        if managers is None:
            managers = self.clusters[name] = ClusterManagers(name, {}, [], -INF)
        return managers

    def add(self, items: Iterable[Item]) -> int:
        """Buffer proposals and answers; returns how many were too late (before what their cluster applied)."""
        return buffer_in_time(items, self._cluster)

    def advance(self, until: int | Mapping[str, int]) -> list[AlterPartitionRequest]:
        """Apply every buffered item strictly before `until` (one time for every cluster, or one per cluster);
        return the requests answered, in the order of their answers."""
        out: list[AlterPartitionRequest] = []
        frontiers = {name: until for name in self.clusters} if isinstance(until, int) else until
        for name, limit in frontiers.items():
            managers = self._cluster(name)
            if limit <= managers.applied_until:
                continue
            managers.buffer.sort(key=_place)
            done = 0
            for item in managers.buffer:
                if item.ts >= limit:
                    break
                wake(managers, item.ts)
                manager = managers.brokers.get(item.broker)
                if manager is None or restarted(item.seq, manager.last_ts):
                    # A new manager, or the broker's new run: the old one's queue and request died with it.
                    manager = managers.brokers[item.broker] = Manager(item.cluster, item.broker, [])
                manager.last_ts = item.ts
                if isinstance(item, AlterPartitionSubmit):
                    submit(manager, item)
                elif isinstance(item, AlterPartitionSendSeen):
                    send_when_handled(manager, item)
                else:
                    self._answer(manager, item, out)
                done += 1
            del managers.buffer[:done]
            wake(managers, limit)
            managers.applied_until = limit
        return out

    def next_due(self) -> int:
        """The earliest time at which advancing could apply a buffered item, send a scheduled resend or end a
        response's handling."""
        buffered = (item.ts for c in self.clusters.values() for item in c.buffer)
        wakes = (
            t for c in self.clusters.values() for m in c.brokers.values() for t in (m.resend_at, m.handled_by)
            if t is not None
        )  # fmt: skip
        return min((*buffered, *wakes), default=INF)

    def managers(self) -> list[tuple[Manager, int]]:
        """Every broker's manager with its cluster's time (the last instant applied), sorted by cluster and broker."""
        return [
            (m, c.applied_until - 1)
            for _, c in sorted(self.clusters.items())
            for _, m in sorted(c.brokers.items())
            if c.applied_until > -INF
        ]

    def pending_partitions(self) -> int:
        """Proposals queued or in flight and not answered yet."""
        return sum(
            len(m.queue) + (0 if m.in_flight is None else sum(i.answered_ms is None for i in m.in_flight.partitions))
            for c in self.clusters.values()
            for m in c.brokers.values()
        )

    def _answer(self, manager: Manager, answer: AlterPartitionAnswer, out: list[AlterPartitionRequest]) -> None:
        """handleAlterPartitionResponse (AlterPartitionManager@3.9.0-rc3 L302-373) for one partition's answer: the
        item leaves the manager; once every partition of the request is answered, the request is done and the next
        one goes at once (L224-227)."""
        request = manager.in_flight
        item = _awaiting(request, answer)
        if item is None:
            unsent = answered_unsent(manager, answer)
            if unsent is not None:
                out.append(unsent)
            else:
                self.ignored["no_request_in_flight" if request is None else "not_in_request"] += 1
            return
        _take_answer(item, answer)
        assert request is not None
        if all(item.answered_ms is not None for item in request.partitions):
            request.response_ms = answer.ts
            out.append(request)
            manager.in_flight = None
            handled_within(manager, answer.ts)
            if answer.top_level:
                resend_after(manager, request, answer.ts)
            else:
                maybe_propagate_isr_changes(manager, answer.ts)


def _awaiting(request: AlterPartitionRequest | None, answer: AlterPartitionAnswer) -> AlterPartitionItem | None:
    """The request's unanswered item of the answer's partition, if any."""
    if request is None:
        return None
    key = (answer.topic, answer.partition)
    return next((i for i in request.partitions if i.answered_ms is None and (i.topic, i.partition) == key), None)


def _take_answer(item: AlterPartitionItem, answer: AlterPartitionAnswer) -> None:
    """The item as its answer leaves it: when, the error or the committed ISR and epoch."""
    item.answered_ms = answer.ts
    item.error = answer.error
    item.committed_isr = None if answer.isr is None else list(answer.isr)
    item.committed_partition_epoch = None if answer.error is not None else answer.partition_epoch


def answered_unsent(manager: Manager, answer: AlterPartitionAnswer) -> AlterPartitionRequest | None:
    """An answer to an item the model still holds queued: the broker's manager sent it in a request the model had not
    made, because the two sides' requests took their proposals in another order (which fetch came first, to the ms:
    a KRaft 4.4.0 lab run had the broker send t-1 alone while the model's t-0 was in flight, then both in one). The
    answer is the evidence of that send (Kafka answers only what a request carried, DefaultAlterPartitionManager@4.4
    L225-283): the item leaves the queue answered, as a request of its own sent when it was submitted, rather than
    waiting behind the model's request for a send the broker already made. None: no such item queued."""
    key = (answer.topic, answer.partition)
    item = next((i for i in manager.queue if (i.topic, i.partition) == key), None)
    if item is None:
        return None
    manager.queue.remove(item)
    _take_answer(item, answer)
    return AlterPartitionRequest(
        cluster=manager.cluster,
        broker=manager.broker,
        sent_ms=item.submitted_ms,
        response_ms=answer.ts,
        partitions=[item],
    )


# How long a broker's manager may take to handle a response before its next request goes (`handled_within`): the
# lab measured a few ms; far more is a model whose queue holds a proposal the broker never made (nothing to send).
HANDLING_BOUND_MS = 1_000


def handled_within(manager: Manager, now: int) -> None:
    """A response answered the request in flight: while the broker handles it the queue waits (`send_when_handled`,
    for a broker that reports its requests), but a queued proposal waits no more than `HANDLING_BOUND_MS` (from the
    answer, or from its submit if later). Kafka's handling returns within ms (DefaultAlterPartitionManager@4.4
    L157-172); a broker that sends nothing after it had nothing queued, and the model's queue, which then holds a
    proposal the broker did not make, goes at the bound instead of never."""
    manager.handling = manager.reports_sends
    manager.handled_by = now + HANDLING_BOUND_MS if manager.handling and manager.queue else None


# The fields a queued item takes from the proposal, as they are.
_FROM_PROPOSAL = ("topic", "partition", "kind", "leader_epoch", "partition_epoch")


def _place(item: Item) -> tuple[object, str, int]:
    """Where an item applies: its order, then its partition. One isr-expiration run submits its partitions one after
    another in Kafka's (hash) order; the model takes them by name, so that every cut into state keys agrees. A retry
    and the answer that caused it share both: the sort is stable, the retry comes first (as it was emitted)."""
    return (item.order, item.topic, item.partition)


def submit(manager: Manager, proposal: AlterPartitionSubmit) -> None:
    """DefaultAlterPartitionManager.submit (AlterPartitionManager@3.9.0-rc3 L155-170): the proposal joins the
    queue, then maybePropagateIsrChanges. Whether the manager already holds an item of the partition
    (`unsentIsrUpdates.putIfAbsent`, L162-167) has one owner, the partition (`Partition.held_by`,
    `state.partition.submit_alter_partition`): it refuses a second item itself, so a submit reaching a manager is
    one it takes."""
    shared = {name: getattr(proposal, name) for name in _FROM_PROPOSAL}
    manager.queue.append(AlterPartitionItem(proposed_isr=list(proposal.isr), submitted_ms=proposal.ts, **shared))
    if manager.handling and manager.handled_by is None:
        manager.handled_by = proposal.ts + HANDLING_BOUND_MS  # `handled_within`
    maybe_propagate_isr_changes(manager, proposal.ts)


# DefaultAlterPartitionManager's backoff after a top-level error: `scheduler.scheduleOnce("send-alter-partition",
# () -> maybePropagateIsrChanges(), 50)` (DefaultAlterPartitionManager@4.4 L174; AlterPartitionManager@3.9.0-rc3 L230).
RESEND_BACKOFF_MS = 50


def resend_after(manager: Manager, request: AlterPartitionRequest, now: int) -> None:
    """A top-level error (`top_level_error`, e.g. STALE_BROKER_EPOCH after a restart or a controller failover)
    answers the request, but handleAlterPartitionResponse removes none of its items (DefaultAlterPartitionManager@4.4
    L225-283: only the NONE case takes items out, L262-277) and completes no future: they stay queued, ahead of what was
    submitted meanwhile, and go again `RESEND_BACKOFF_MS` later, or sooner with the next submit, whose
    maybePropagateIsrChanges finds no request in flight (L104-124; 3.9.0-rc3 L155-180). The brokers resend so until
    the controller takes their epoch: hundreds of requests in a few seconds on the KRaft lab."""
    unanswered = {"answered_ms": None, "error": None, "committed_isr": None, "committed_partition_epoch": None}
    again = [msgspec.structs.replace(i, **unanswered) for i in request.partitions]
    held = {(i.topic, i.partition) for i in again}
    manager.queue = again + [i for i in manager.queue if (i.topic, i.partition) not in held]  # one item a partition
    manager.resend_at = now + RESEND_BACKOFF_MS


def wake(managers: ClusterManagers, until: int) -> None:
    """Run what each manager scheduled before `until` (a submit or answer at the same ms goes first): the resend after
    a top-level error (`resend_after`), which ends any handling and sends, then the end of a response's handling at
    its bound (`handled_within`), which sends only a queue still held."""
    for manager in managers.brokers.values():
        resend, bound = manager.resend_at, manager.handled_by
        if resend is not None and resend < until:
            manager.resend_at, manager.handling = None, False
            maybe_propagate_isr_changes(manager, resend)
        if bound is not None and bound < until:
            manager.handled_by = None
            if manager.handling:
                manager.handling = False
                maybe_propagate_isr_changes(manager, bound)


# How recent a proposal the broker's observed request did not carry may be and still wait for the next request
# (`not_carried_yet`): a proposal refused while the broker handled its partition's answer comes again at the
# follower's next fetch, within replica.fetch.wait.max.ms (500 ms, Kafka's default and the lab's).
NEXT_REQUEST_MS = 500


def not_carried_yet(manager: Manager, seen: AlterPartitionSendSeen) -> list[AlterPartitionItem]:
    """The queued items the broker's observed request did not carry that the model proposed within `NEXT_REQUEST_MS`
    before it: they go with the next request. Two races, at the ms, put the broker's same proposal there:
    - it was submitted after the request took the queue: a fetch's proposal is submitted after the fetch's state
      update and the ISR check (Partition@4.4 updateFollowerFetchState L767-800; the agent reports the update), and
      the sending thread copies the queue (`new ArrayList<>(unsentIsrUpdates.values())`,
      DefaultAlterPartitionManager@4.4 L121) with no lock in common (the KRaft 4.4.0 lab: a fetch reported in the
      request's ms made an expand that went in the next request);
    - it was refused: a submit while the manager still holds the partition's answered item (it removes it inside
      handleAlterPartitionResponse, L225-283, after the entry the agent stamps the answer at) fails
      OPERATION_NOT_ATTEMPTED and the partition proposes again at the follower's next fetch (the lab: refused 3 ms
      after the answer, proposed again 103 ms later, sent in the request after next).
    One proposed earlier goes, carried or not: a request that differs from the broker's then shows it, and the audit
    pairs proposals on their own."""
    if seen.carried is None:
        return []
    carried = set(seen.carried)
    return [
        i for i in manager.queue
        if (i.topic, i.partition) not in carried and seen.ts - i.submitted_ms <= NEXT_REQUEST_MS
    ]  # fmt: skip


def send_when_handled(manager: Manager, seen: AlterPartitionSendSeen) -> None:
    """The broker's manager sent a request (the agent's `alter_partition_sent`): the response before it has been
    handled. Kafka clears the in-flight flag only when handleAlterPartitionResponse returns, after every partition's
    callback ran (its `finally`, then maybePropagateIsrChanges: DefaultAlterPartitionManager@4.4 L157-172; the
    callbacks apply the answers under each partition's lock, L262-275), so a proposal submitted meanwhile joins the
    next request. On a loaded broker that takes ms (the KRaft lab: an expand submitted 1 ms after the answer went
    with the two shrinks queued before it). The agent does not report the return, only the next request: a manager
    whose broker reports its requests holds its queue after an answer until the broker's next request, and then
    sends it (the model's content, the broker's moment)."""
    manager.reports_sends = True
    manager.handled_by = None
    if manager.handling:
        manager.handling = False
        maybe_propagate_isr_changes(manager, seen.ts, not_carried_yet(manager, seen))


def maybe_propagate_isr_changes(manager: Manager, now: int, later: list[AlterPartitionItem] | None = None) -> None:
    """DefaultAlterPartitionManager.maybePropagateIsrChanges (AlterPartitionManager@3.9.0-rc3 L172-180): if no
    request is in flight (nor its response still being handled: `send_when_handled`), every queued item goes in one
    request, sent at `now`, but those the broker's request did not carry yet (`later`)."""
    going = [i for i in manager.queue if not later or i not in later]
    if manager.in_flight is None and not manager.handling and going:
        manager.in_flight = AlterPartitionRequest(
            cluster=manager.cluster, broker=manager.broker, sent_ms=now, response_ms=None, partitions=going
        )
        manager.queue = [i for i in manager.queue if i not in going]
