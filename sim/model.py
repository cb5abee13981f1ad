"""A deterministic Kafka cluster simulator: the SPEC §3 input events a real cluster would produce.

Pure model: no I/O, no clock. `simulate(config, faults, seed)` yields events in (ts, seq) order.
Brokers lead partitions (replicas assigned the way Kafka's AdminUtils spreads preferred leaders),
producers append to leaders, followers fetch the way Kafka's replica fetchers do (a caught-up
follower's fetch waits at the leader up to replica.fetch.wait.max.ms for new data, so an idle
follower fetches about every 500 ms and a busy one right after each append), and the controller
sends LeaderAndIsr on startup and on every leadership change. Faults are scripted with start/end
times relative to the start (`faults.parse_fault`, `faults.scenario`).

The controller must send the ISR the leader last wrote to ZooKeeper, so the simulated leaders keep
their ISR with isrwatch's own engine (isrwatch.state.engine), fed with exactly the events emitted.

With AlterPartition (`kafka.isr_protocol`, SPEC §4.9) the leaders propose their ISR changes through the engine's
own per-broker managers (isrwatch.state.alter_partition: one request in flight, the rest queued), and the
controller answers each request `alter_partition_latency_ms` after it was sent: at least, since the simulator
takes a request at its next event (the next millisecond that has one; a request sent at an answer, one millisecond
later). A fault holds the answers (a stuck controller channel) or refuses a proposal adding a fenced broker
(INELIGIBLE_REPLICA). Every broker registers at the start (`broker_registration`), and again when fenced or
unfenced.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import Any

from isrwatch.state.alter_partition import AlterPartitionBook
from isrwatch.state.config import ConfigError
from isrwatch.state.engine import PartitionEngine
from isrwatch.state.events import (
    AlterPartitionResponse,
    Append,
    BrokerRegistration,
    Event,
    Fetch,
    LeaderAndIsr,
    event_to_dict,
)
from isrwatch.state.partition import Partition
from isrwatch.state.records import AlterPartitionRequest, DecisionKind
from isrwatch.state.schedule import INF

from .config import SimConfig
from .faults import Fault, scenario

_APPEND, _FETCH, _ACTION = 0, 1, 2
# Heap entries: (ts, phase, n, kind, part, replica, generation, action). Controller and fault actions
# (phase 0) run before the producer and fetcher activity of the same millisecond (phase 1).
_PHASE_ACTION, _PHASE_TRAFFIC = 0, 1
# Faults of the AlterPartition path: they need leaders that propose with it.
_ALTER_PARTITION_FAULTS = ("stuck-controller", "fence")
ALTER = "alter_partition"


class _Part:
    """One partition as the cluster holds it: assignment, leadership, every replica's LEO."""

    __slots__ = (
        "topic",
        "partition",
        "key",
        "replicas",
        "leader",
        "leader_epoch",
        "leo",
        "gen",
        "parked",
        "next_append",
    )

    def __init__(self, cluster: str, topic: str, partition: int, replicas: tuple[int, ...], leo: int) -> None:
        self.topic = topic
        self.partition = partition
        self.key = (cluster, topic, partition)
        self.replicas = replicas
        self.leader = replicas[0]
        self.leader_epoch = 0
        self.leo = dict.fromkeys(replicas, leo)
        self.gen = dict.fromkeys(replicas, 0)  # a fetch timer of an older generation is void
        self.parked: set[int] = set()  # followers whose fetch waits at the leader for new data
        self.next_append = 0  # when the producers' next batch arrives


def assign_replicas(brokers: list[int], partitions: int, rf: int, rng: random.Random) -> list[tuple[int, ...]]:
    """Kafka's rack-unaware assignment (AdminUtils.assignReplicasToBrokers): preferred leaders round-robin
    from a random start, followers shifted so that replicas spread evenly."""
    n = len(brokers)
    start = rng.randrange(n)
    shift = rng.randrange(n)
    out = []
    for p in range(partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [brokers[first]]
        for j in range(rf - 1):
            replicas.append(brokers[(first + 1 + (shift + j) % (n - 1)) % n])
        out.append(tuple(replicas))
    return out


class Cluster:
    """The simulation state and its event loop; use `simulate` / `simulate_events`."""

    def __init__(self, config: SimConfig, faults: Iterable[Fault], seed: int) -> None:
        self.config = config
        self.rng = random.Random(seed)
        self.t0 = config.start_ms
        self.end = INF if config.duration_ms is None else config.start_ms + config.duration_ms
        self.broker_ids = list(range(1, config.brokers + 1))
        self.alive = dict.fromkeys(self.broker_ids, True)
        self.controller = 1
        self.controller_epoch = 1
        self.stalled_until = dict.fromkeys(self.broker_ids, -INF)
        self.slow: dict[int, Fault] = {}
        self.bursts: dict[int, tuple[Fault, dict[tuple[str, int], int], int, int, int]] = {}
        self.impaired = dict.fromkeys(self.broker_ids, False)
        self.parts: list[_Part] = []
        for t in config.topics:
            for p, replicas in enumerate(
                assign_replicas(self.broker_ids, t.partitions, t.replication_factor, self.rng)
            ):
                self.parts.append(_Part(config.cluster, t.name, p, replicas, self.rng.randrange(1000, 1_000_000)))
        faults = list(faults)
        # The leaders' replica managers: the ISR each leader keeps, as the controller reads it from ZooKeeper.
        # Only controller actions read it, so a script without them does not pay for it.
        self.alter_partition = config.kafka.alter_partition
        self.leaders = (
            PartitionEngine(config.kafka, owns_ticks=False)
            if self.alter_partition or any(f.kind in ("crash", "failover", "elect") for f in faults)
            else None
        )
        # AlterPartition: the leaders' managers as the engine drives them, the requests the controller has taken,
        # the brokers whose answers it holds (with the requests held), the brokers it has fenced.
        self.managers = AlterPartitionBook()
        self.driven_until = -INF
        self.taken: set[tuple[int, int]] = set()  # (broker, sent_ms): a broker sends one request per millisecond
        self.held: dict[int, list[AlterPartitionRequest]] = {}
        self.fenced: set[int] = set()
        self.unapplied: list[Event] = []
        self.heap: list[tuple] = []
        self.counter = itertools.count()
        self.seq = 0
        self.pending: list[Event] = []
        for fault in faults:
            self._validate(fault)
            self._at(self.t0 + fault.start_ms, self._fault_start, fault)
            if fault.end_ms is not None:
                self._at(self.t0 + fault.end_ms, self._fault_end, fault)

    def _validate(self, fault: Fault) -> None:
        if fault.kind in _ALTER_PARTITION_FAULTS and not self.alter_partition:
            raise ConfigError(f"{fault}: needs leaders that propose with AlterPartition (--isr-protocol {ALTER})")
        for b in (fault.broker, fault.to):
            if b is not None and b not in self.alive:
                raise ConfigError(f"{fault}: broker {b} does not exist (brokers are 1..{self.config.brokers})")

    # -- scheduling -------------------------------------------------------------------------------

    def _push(
        self,
        ts: int,
        phase: int,
        kind: int,
        part: _Part | None = None,
        replica: int = 0,
        gen: int = 0,
        action: Callable[..., None] | None = None,
        arg: Any = None,
    ) -> None:
        heapq.heappush(self.heap, (ts, phase, next(self.counter), kind, part, replica, gen, action, arg))

    def _at(self, ts: int, action: Callable[..., None], arg: Any = None) -> None:
        self._push(ts, _PHASE_ACTION, _ACTION, action=action, arg=arg)

    def _rtt(self) -> int:
        return 1 + int(self.rng.random() * 2 * self.config.fetch_rtt_ms)

    def _fetch_later(self, p: _Part, replica: int, ts: int) -> None:
        """(Re)start a follower's fetch loop at `ts`; any timer it had is void."""
        gen = p.gen[replica] = p.gen[replica] + 1
        p.parked.discard(replica)
        self._push(ts, _PHASE_TRAFFIC, _FETCH, p, replica, gen)

    def _emit(self, ev: Event) -> None:
        self.seq += 1
        ev.seq = self.seq
        self.pending.append(ev)
        if self.leaders is not None:
            self.unapplied.append(ev)

    def _leader_view(self, p: _Part, now: int) -> Partition:
        """The leader's current replica state (ISR, zkVersion) with every event before `now` applied."""
        assert self.leaders is not None, "only controller actions read the leaders' state"
        self._advance_leaders(now)
        return self.leaders.partitions[p.key]

    def _advance_leaders(self, now: int) -> None:
        """Apply every emitted event before `now` to the leaders; with AlterPartition, pass their proposals and
        answers to their managers and have the controller take each request they sent."""
        assert self.leaders is not None
        if self.unapplied:
            self.leaders.add(self.unapplied)
            self.unapplied.clear()
        out = self.leaders.advance(now)
        if not self.alter_partition or now <= self.driven_until:
            return
        self.driven_until = now
        self.managers.add(out.alter_partition)
        self.managers.advance(now)
        for manager, _ in self.managers.managers():
            request = manager.in_flight
            if request is not None and (manager.broker, request.sent_ms) not in self.taken:
                self.taken.add((manager.broker, request.sent_ms))
                at = max(request.sent_ms + self.config.alter_partition_latency_ms, now)
                self._at(at, self._answer_request, request)

    def _answer_request(self, ts: int, request: AlterPartitionRequest) -> None:
        """The controller's answer to each partition of a leader's request (ReplicationControlManager
        .alterPartition): committed with the next partition epoch, INELIGIBLE_REPLICA for a proposal that adds a
        fenced broker, FENCED_LEADER_EPOCH for a leader epoch that moved on; held while the channel is stuck."""
        if request.broker in self.held:
            self.held[request.broker].append(request)
            return
        self._at(ts + 1, self._wake)  # the leader sends its next request at once: take it in the next millisecond
        by_key = {(p.topic, p.partition): p for p in self.parts}
        for item in request.partitions:
            p = by_key[(item.topic, item.partition)]
            error = None
            if item.leader_epoch != p.leader_epoch:
                error = "FENCED_LEADER_EPOCH"
            elif item.kind is DecisionKind.EXPAND and self.fenced & set(item.proposed_isr):
                error = "INELIGIBLE_REPLICA"
            committed = (
                {}
                if error is not None
                else {
                    "isr": item.proposed_isr,
                    "leader_epoch": item.leader_epoch,
                    "partition_epoch": item.partition_epoch + 1,
                }
            )
            answer = {"topic": item.topic, "partition": item.partition, "broker": request.broker, "error": error}
            self._emit(AlterPartitionResponse(ts=ts, cluster=self.config.cluster, **answer, **committed))

    def _wake(self, ts: int, _: Any) -> None:
        """Nothing to do: being due makes the loop drive the leaders at `ts` (see `_advance_leaders`)."""

    def _register(self, ts: int, broker: int) -> None:
        """The broker's registration as the leaders' metadata has it (KRaft)."""
        self._emit(
            BrokerRegistration(
                ts=ts,
                cluster=self.config.cluster,
                id=broker,
                epoch=1,
                fenced=broker in self.fenced,
                in_controlled_shutdown=False,
            )
        )

    # -- the event loop ---------------------------------------------------------------------------

    def run(self) -> Iterator[Event]:
        cfg = self.config
        random_ = self.rng.random
        cluster = cfg.cluster
        wait = cfg.replica_fetch_wait_max_ms
        rtt2 = 2 * cfg.fetch_rtt_ms
        append_mean = cfg.append_interval_ms
        records2 = 2 * cfg.records_per_append
        alive = self.alive
        impaired = self.impaired
        slow_brokers = self.slow
        heap = self.heap
        heappop = heapq.heappop
        heappush = heapq.heappush
        log = math.log
        counter = self.counter
        pending = self.pending
        unapplied = self.unapplied
        track = self.leaders is not None
        t0 = self.t0
        self._at(t0, self._startup)
        for p in self.parts:
            p.next_append = t0 + 1 + int(random_() * append_mean)
            self._push(p.next_append, _PHASE_TRAFFIC, _APPEND, p)
        end = self.end
        seq = 0
        alter_partition = self.alter_partition
        while heap:
            ts, _phase, _n, kind, p, replica, gen, action, arg = heappop(heap)
            if ts > end:
                break
            if alter_partition and ts > self.driven_until:
                self._advance_leaders(ts)
                if heap and heap[0][:2] < (ts, _phase):  # an answer due now, before this entry
                    heappush(heap, (ts, _phase, _n, kind, p, replica, gen, action, arg))
                    continue
            if kind == _FETCH:
                if gen != p.gen[replica]:
                    continue
                p.parked.discard(replica)
                leader = p.leader
                if leader < 0 or leader == replica or not alive[leader] or not alive[replica]:
                    continue  # the fetch loop restarts when the leadership changes or the broker restarts
                if impaired[replica]:
                    resume = self._blocked_until(p, replica, ts)
                    if resume is not None:
                        if resume < INF:
                            self._push(resume + self._rtt(), _PHASE_TRAFFIC, _FETCH, p, replica, gen)
                        continue
                leo = p.leo
                leader_leo = leo[leader]
                offset = leo[replica]
                seq += 1
                ev = Fetch(
                    ts=ts,
                    cluster=cluster,
                    topic=p.topic,
                    partition=p.partition,
                    replica=replica,
                    fetch_offset=offset,
                    leader_leo=leader_leo,
                    current_leader_epoch=p.leader_epoch,
                    seq=seq,
                )
                if offset < leader_leo:
                    slow = slow_brokers.get(replica) if impaired[replica] else None
                    if slow is None:
                        leo[replica] = leader_leo
                        nxt = ts + 1 + int(random_() * rtt2)
                    else:
                        leo[replica] = offset + int((leader_leo - offset) * slow.share)
                        nxt = ts + slow.rtt_ms
                    heappush(heap, (nxt, _PHASE_TRAFFIC, next(counter), _FETCH, p, replica, gen, None, None))
                else:
                    # Nothing to read: the leader holds the fetch until an append or the wait runs out.
                    p.parked.add(replica)
                    nxt = ts + wait + 1 + int(random_() * rtt2)
                    if p.next_append > ts + wait:
                        heappush(heap, (nxt, _PHASE_TRAFFIC, next(counter), _FETCH, p, replica, gen, None, None))
            elif kind == _APPEND:
                leader = p.leader
                gap = 1 + int(-log(1.0 - random_()) * append_mean)
                p.next_append = ts + gap
                heappush(heap, (ts + gap, _PHASE_TRAFFIC, next(counter), _APPEND, p, 0, 0, None, None))
                if leader < 0 or not alive[leader]:
                    continue  # producers get NOT_LEADER / time out until a leader is back
                leo = p.leo
                leader_leo = leo[leader] = leo[leader] + 1 + int(random_() * records2)
                seq += 1
                ev = Append(
                    ts=ts, cluster=cluster, topic=p.topic, partition=p.partition, leader_leo=leader_leo, seq=seq
                )
                if p.parked:
                    # The waiting fetches complete with the new data; each follower fetches again.
                    gens = p.gen
                    for r in p.parked:
                        slow = slow_brokers.get(r) if impaired[r] else None
                        leo[r] = leader_leo if slow is None else leo[r] + int((leader_leo - leo[r]) * slow.share)
                        gens[r] += 1  # the wait's own timeout, if it had one, is void now
                        heappush(
                            heap,
                            (
                                ts + 1 + int(random_() * rtt2),
                                _PHASE_TRAFFIC,
                                next(counter),
                                _FETCH,
                                p,
                                r,
                                gens[r],
                                None,
                                None,
                            ),
                        )
                    p.parked.clear()
            else:
                self.seq = seq
                action(ts, arg)
                seq = self.seq
                yield from pending
                pending.clear()
                continue
            if track:
                unapplied.append(ev)
                if len(unapplied) >= 65536:
                    self._advance_leaders(ts)
            yield ev

    def _blocked_until(self, p: _Part, replica: int, ts: int) -> int | None:
        """When an impaired follower may fetch again (None: now; INF: not until another action)."""
        until = self.stalled_until[replica]
        if until > ts:
            return until
        burst = self.bursts.get(replica)
        if burst is not None:
            fault, order, spacing, cycle, pause = burst
            k = order.get((p.topic, p.partition))
            if k is not None:
                rel = ts - (self.t0 + fault.start_ms) - k * spacing
                if rel >= 0:
                    began = ts - rel % cycle
                    if rel % cycle < pause and began < self.t0 + fault.end_ms:
                        return min(began + pause, self.t0 + fault.end_ms)
        return None

    def _update_impaired(self, broker: int, ts: int) -> None:
        self.impaired[broker] = self.stalled_until[broker] > ts or broker in self.slow or broker in self.bursts

    # -- controller -------------------------------------------------------------------------------

    def _leader_and_isr(
        self,
        p: _Part,
        ts: int,
        leader: int,
        isr: Iterable[int],
        *,
        leader_epoch: int | None = None,
        partition_epoch: int | None = None,
        controller_epoch: int | None = None,
        controller_id: int | None = None,
        hw: int | None = None,
    ) -> None:
        """Send one partition state; the partition follows it only if the leader would accept it."""
        view = self._leader_view(p, ts)
        controller_epoch = self.controller_epoch if controller_epoch is None else controller_epoch
        leader_epoch = p.leader_epoch + 1 if leader_epoch is None else leader_epoch
        ev = LeaderAndIsr(
            ts=ts,
            cluster=self.config.cluster,
            topic=p.topic,
            partition=p.partition,
            controller_epoch=controller_epoch,
            leader=leader,
            leader_epoch=leader_epoch,
            isr=sorted(isr),
            replicas=list(p.replicas),
            partition_epoch=view.partition_epoch + 1 if partition_epoch is None else partition_epoch,
            controller_id=self.controller if controller_id is None else controller_id,
            leader_leo=p.leo[leader] if leader >= 0 else None,
            hw=hw,
        )
        self._emit(ev)
        if controller_epoch < view.controller_epoch or leader_epoch <= p.leader_epoch:
            return  # rejected: nothing changes
        changed = leader != p.leader
        p.leader = leader
        p.leader_epoch = leader_epoch
        if changed and leader >= 0:
            # Followers truncate to the new leader's log and start fetching from it.
            p.parked.clear()
            for r in p.replicas:
                if r != leader:
                    p.leo[r] = min(p.leo[r], p.leo[leader])
                    if self.alive[r]:
                        self._fetch_later(p, r, ts + 10 + self._rtt())

    def _startup(self, ts: int, _: Any) -> None:
        """The controller's first LeaderAndIsr: preferred leaders, every replica in sync (KRaft: after every
        broker registered)."""
        if self.alter_partition:
            for b in self.broker_ids:
                self._register(ts, b)
        for p in self.parts:
            self._emit(
                LeaderAndIsr(
                    ts=ts,
                    cluster=self.config.cluster,
                    topic=p.topic,
                    partition=p.partition,
                    controller_epoch=self.controller_epoch,
                    leader=p.leader,
                    leader_epoch=0,
                    isr=sorted(p.replicas),
                    replicas=list(p.replicas),
                    partition_epoch=0,
                    controller_id=self.controller,
                    leader_leo=p.leo[p.leader],
                    hw=p.leo[p.leader],
                )
            )
            for r in p.replicas[1:]:
                self._fetch_later(p, r, ts + 1 + int(self.rng.random() * self.config.replica_fetch_wait_max_ms))

    def _new_controller(self, to: int | None = None) -> None:
        live = [b for b in self.broker_ids if self.alive[b] and b != self.controller]
        if to is None:
            to = next((b for b in live if b > self.controller), live[0] if live else self.controller)
        self.controller = to
        self.controller_epoch += 1

    def _broker_failure(self, ts: int, broker: int) -> None:
        """KafkaController.onBrokerFailure: elect new leaders from the live ISR, then drop the broker from ISRs."""
        if self.alive[broker]:
            return  # back before its ZooKeeper session expired: the controller never noticed
        if broker == self.controller:
            self._new_controller()
        for p in self.parts:
            if broker not in p.replicas:
                continue
            isr = self._leader_view(p, ts).isr
            if p.leader == broker:
                live_isr = [r for r in p.replicas if r in isr and self.alive[r]]
                if live_isr:
                    self._leader_and_isr(p, ts, live_isr[0], live_isr)
                else:  # no live in-sync replica (unclean election off): offline, the last ISR kept
                    self._leader_and_isr(p, ts, -1, isr if len(isr) == 1 else [r for r in isr if r != broker])
            elif broker in isr and p.leader >= 0:
                self._leader_and_isr(p, ts, p.leader, [r for r in isr if r != broker])

    def _broker_startup(self, ts: int, broker: int) -> None:
        """KafkaController.onBrokerStartup: offline partitions it was the last ISR of come back led by it;
        elsewhere it becomes a follower, truncates to the leader's log and fetches."""
        for p in self.parts:
            if broker not in p.replicas:
                continue
            if p.leader == -1:
                if broker in self._leader_view(p, ts).isr:
                    self._leader_and_isr(p, ts, broker, [broker])
            elif p.leader == broker:  # it came back before the controller noticed: its followers resume
                for r in p.replicas:
                    if r != broker and self.alive[r]:
                        self._fetch_later(p, r, ts + self._rtt())
            elif self.alive[p.leader]:
                p.leo[broker] = min(p.leo[broker], p.leo[p.leader])
                self._fetch_later(p, broker, ts + 100 + int(self.rng.random() * self.config.replica_fetch_wait_max_ms))

    def _preferred_election(self, ts: int) -> None:
        for p in self.parts:
            preferred = p.replicas[0]
            if p.leader >= 0 and p.leader != preferred and self.alive[preferred]:
                isr = self._leader_view(p, ts).isr
                if preferred in isr:
                    self._leader_and_isr(p, ts, preferred, isr)

    def _failover(self, ts: int, fault: Fault) -> None:
        """A new controller re-sends every partition's state (same leader epoch: each leader answers
        STALE_CONTROLLER_EPOCH but learns the new controller epoch); the old controller, not yet aware
        it lost its session, still sends a few leadership moves with its old epoch."""
        old, old_epoch = self.controller, self.controller_epoch
        self._new_controller(fault.to)
        for p in self.parts:
            view = self._leader_view(p, ts)
            self._leader_and_isr(
                p, ts, p.leader, view.isr, leader_epoch=p.leader_epoch, partition_epoch=view.partition_epoch
            )
        online = [p for p in self.parts if p.leader >= 0]
        for k, p in enumerate(self.rng.sample(online, min(fault.stale, len(online)))):
            self._at(ts + 200 + 100 * k, self._zombie_request, (p, old, old_epoch))

    def _zombie_request(self, ts: int, arg: tuple[_Part, int, int]) -> None:
        p, old, old_epoch = arg
        isr = self._leader_view(p, ts).isr
        target = next((r for r in isr if r != p.leader and self.alive[r]), p.leader)
        self._leader_and_isr(p, ts, target, isr, controller_epoch=old_epoch, controller_id=old)

    # -- faults -----------------------------------------------------------------------------------

    def _fault_start(self, ts: int, fault: Fault) -> None:
        b = fault.broker
        if fault.kind == "stall":
            self.stalled_until[b] = INF if fault.end_ms is None else self.t0 + fault.end_ms
        elif fault.kind == "slow":
            self.slow[b] = fault
        elif fault.kind == "crash":
            self.alive[b] = False
            self._at(ts + self.config.zookeeper_session_timeout_ms, self._broker_failure, b)
        elif fault.kind == "failover":
            self._failover(ts, fault)
        elif fault.kind == "burst":
            self._start_burst(ts, fault)
        elif fault.kind == "elect":
            self._preferred_election(ts)
        elif fault.kind == "stuck-controller":
            self.held.setdefault(b, [])
        elif fault.kind == "fence":
            self.fenced.add(b)
            self._at(ts + fault.notice_ms, self._register_if_fenced, b)
        if b is not None:
            self._update_impaired(b, ts)

    def _fault_end(self, ts: int, fault: Fault) -> None:
        b = fault.broker
        if fault.kind == "slow":
            self.slow.pop(b, None)
        elif fault.kind == "crash":
            self.alive[b] = True
            self._broker_startup(ts, b)
        elif fault.kind == "burst":
            self.bursts.pop(b, None)
        elif fault.kind == "stuck-controller":
            for request in self.held.pop(b, []):
                self._answer_request(ts, request)
        elif fault.kind == "fence":
            self.fenced.discard(b)
            self._register(ts, b)
        if b is not None:
            self._update_impaired(b, ts)

    def _register_if_fenced(self, ts: int, broker: int) -> None:
        """The leaders learn of a fence (unless it already ended)."""
        if broker in self.fenced:
            self._register(ts, broker)

    def _start_burst(self, ts: int, fault: Fault) -> None:
        """Each of the broker's follower replicas stalls in turn, evenly spread over one cycle."""
        kafka = self.config.kafka
        pause = kafka.replica_lag_time_max_ms + kafka.expiration_interval_ms + 2 * self.config.replica_fetch_wait_max_ms
        cycle = pause + fault.resume_ms
        by_leader: dict[int, list[_Part]] = {}
        for p in self.parts:
            if fault.broker in p.replicas and p.leader not in (fault.broker, -1):
                by_leader.setdefault(p.leader, []).append(p)
        # Take the leaders in turn so that each one sees an even stream of changes.
        following = [p for group in itertools.zip_longest(*by_leader.values()) for p in group if p is not None]
        order = {(p.topic, p.partition): k for k, p in enumerate(following)}
        spacing = max(1, cycle // max(1, len(following)))
        self.bursts[fault.broker] = (fault, order, spacing, cycle, pause)


def simulate_events(config: SimConfig, faults: Iterable[Fault] = (), seed: int = 0) -> Iterator[Event]:
    """The cluster's input events as typed structs, in (ts, seq) order (fastest: encode with msgspec)."""
    return Cluster(config, faults, seed).run()


def simulate(config: SimConfig, faults: Iterable[Fault] = (), seed: int = 0) -> Iterator[dict]:
    """The cluster's input events as SPEC §3 dicts, in (ts, seq) order."""
    return map(event_to_dict, simulate_events(config, faults, seed))


def with_scenario(config: SimConfig, name: str) -> tuple[SimConfig, list[Fault]]:
    """The config and faults of a preset: its own topics if it has some, and its length."""
    sc = scenario(name, config.kafka)
    return replace(config, topics=sc.topics or config.topics, duration_ms=sc.duration_ms), list(sc.faults)
