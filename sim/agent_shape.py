"""An agent-shaped stream: what isrwatch-agent sends from a cluster's brokers (agent/README.md), for benchmarks.

Each broker reports what it leads: its isr-expiration runs (every lag / 2) and isr-change-propagation
runs (every 2.5 s) as ticks; every follower fetch that moves something; a caught-up follower's repeats
coalesced into the one fetch the agent emits before its leader's next isr-expiration run; the LEO a
run read, as an `append` when it moved; the leader's ISR writes (`isr_updated`) and propagation
batches (`isr_change_propagated`); a `watermark` every 200 ms per broker, as the agent's timer sends them
(the agent's clock less its 100 ms slack: its held repeats are the one exception). A share of the partitions
takes writes, so each fetch of theirs carries data; a few followers of those stop fetching and are shrunk. Kafka's
rules decide the shrinks and batches here, so the model (run with `--profile agent`: the ticks are the checks)
agrees with them.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .synthetic import ClusterShape

KAFKA_VERSION = "3.9.2"
SLACK_MS = 100  # the agent's `watermark.slack.ms`


@dataclass(frozen=True)
class AgentShape(ClusterShape):
    """The stuck followers are followers of written partitions; they stop fetching 2 s in."""

    lag_ms: int = 10_000  # replica.lag.time.max.ms: isr-expiration runs every half of it
    propagation_interval_ms: int = 2500
    linger_ms: int = 5000
    max_delay_ms: int = 60_000
    active_share: float = 0.1  # the partitions producers write to, once every fetch interval
    watermark_interval_ms: int = 200  # the agent's `watermark.interval.ms` (0: none, as an agent before them)


@dataclass
class _Follower:
    replica: int
    offset: int  # what its next fetch asks from: its LEO
    last_caught_up_ms: int
    last_fetch_leader_leo: int
    last_fetch_ms: int
    phase: int  # its fetches fall at this offset into each fetch interval
    stuck: bool = False

    def fetch(self, t: int, leader_leo: int) -> None:
        """Replica.updateFetchState (SPEC §4.2); the follower then has everything up to `leader_leo`."""
        if self.offset >= leader_leo:
            self.last_caught_up_ms = max(self.last_caught_up_ms, t)
        elif self.offset >= self.last_fetch_leader_leo:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.last_fetch_leader_leo = leader_leo
        self.last_fetch_ms = t
        self.offset = leader_leo


@dataclass
class _Partition:
    topic: str
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]
    leo: int
    written: bool
    followers: list[_Follower]
    append_phase: int
    epoch: int = 0
    reported_leo: int = 0  # the highest leader LEO its events carried since its leader_and_isr


@dataclass
class _Broker:
    id: int
    check_phase: int
    propagation_phase: int
    last_isr_change_ms: int
    last_propagation_ms: int
    led: list[_Partition] = field(default_factory=list)
    pending: set[tuple[str, int]] = field(default_factory=set)


class _Agents:
    """The brokers, their partitions and the events emitted in the current fetch interval."""

    def __init__(self, shape: AgentShape, seed: int) -> None:
        self.shape = shape
        rng = self.rng = random.Random(seed)
        self.step = shape.fetch_interval_ms
        self.interval = shape.lag_ms // 2
        started = shape.start_ms - 60_000  # the brokers' start: their propagation throttle starts there
        self.brokers = [
            _Broker(b, rng.randrange(self.interval), rng.randrange(shape.propagation_interval_ms), started, started)
            for b in range(shape.brokers)
        ]
        self.seqs = [(started + 7 * b) * 1000 for b in range(shape.brokers)]  # each agent numbers its own output
        per_topic = -(-shape.partitions // shape.topics)
        t0 = shape.start_ms
        self.partitions: list[_Partition] = []
        for i in range(shape.partitions):
            leader = i % shape.brokers
            replicas = [(leader + k) % shape.brokers for k in range(shape.rf)]
            leo = rng.randrange(1000, 100_000)
            elected = t0 + i % self.step  # its leader_and_isr: the followers in its ISR are caught up then
            p = _Partition(
                topic=f"topic-{i // per_topic}",
                partition=i % per_topic,
                leader=leader,
                replicas=replicas,
                isr=sorted(replicas),
                leo=leo,
                written=rng.random() < shape.active_share,
                followers=[_Follower(r, leo, elected, leo, elected, rng.randrange(self.step)) for r in replicas[1:]],
                append_phase=rng.randrange(self.step),
                reported_leo=leo,
            )
            self.partitions.append(p)
            self.brokers[leader].led.append(p)
        written = [f for p in self.partitions if p.written for f in p.followers]
        for f in rng.sample(written, min(shape.stuck_followers, len(written))):
            f.stuck = True
        self.window: list[tuple[int, int, int, dict[str, Any]]] = []  # (emitted at, order, broker, event)

    def emit(self, at: int, broker: int, ev: dict[str, Any]) -> None:
        self.window.append((at, len(self.window), broker, ev))

    def drain(self) -> list[dict[str, Any]]:
        """The window's events in emission order, each numbered by its broker's agent."""
        out = []
        for _, _, b, ev in sorted(self.window, key=lambda x: (x[0], x[1])):
            self.seqs[b] += 1
            out.append({**ev, "seq": self.seqs[b]})
        self.window.clear()
        return out

    def _of(self, p: _Partition) -> dict[str, Any]:
        return {"cluster": self.shape.cluster, "broker": p.leader, "topic": p.topic, "partition": p.partition}

    def _fetch(self, at: int, p: _Partition, f: _Follower, t: int, leader_leo: int) -> None:
        ev = {"type": "fetch", "ts": t, **self._of(p), "replica": f.replica, "fetch_offset": f.offset}
        self.emit(at, p.leader, ev | {"leader_leo": leader_leo, "log_start_offset": 0, "current_leader_epoch": 0})
        f.fetch(t, leader_leo)
        p.reported_leo = max(p.reported_leo, leader_leo)

    def leader_and_isr(self) -> None:
        """Each partition's leader_and_isr, then each follower's first fetch after it: not a repeat (the agent holds
        a caught-up fetch only after an earlier one of its partition since its last other event), so sent at once."""
        t0 = self.shape.start_ms
        for i, p in enumerate(self.partitions):
            ts = t0 + i % self.step
            for f in p.followers:
                if not p.written:
                    self._fetch(ts + 1 + f.phase, p, f, ts + 1 + f.phase, p.leo)
            self.emit(
                ts,
                p.leader,
                {"type": "leader_and_isr", "ts": ts, **self._of(p), "controller_epoch": 1, "controller_id": 0}
                | {"leader": p.leader, "leader_epoch": 0, "isr": p.isr, "replicas": p.replicas, "partition_epoch": 0}
                | {"leader_leo": p.leo, "hw": p.leo, "min_insync_replicas": 1, "new_leader": True},
            )

    def interval_from(self, w: int) -> None:
        """Everything in [w, w + fetch interval): the written partitions' fetches, then the brokers' runs."""
        stuck_from = self.shape.start_ms + 2000
        for p in self.partitions:
            if not p.written:
                continue
            appended = w + p.append_phase
            grown = p.leo + self.rng.randrange(1, 200)
            for f in p.followers:
                t = w + f.phase
                if not (f.stuck and t >= stuck_from):
                    self._fetch(t, p, f, t, grown if t >= appended else p.leo)
            p.leo = grown
        end = w + self.step
        if self.shape.watermark_interval_ms > 0:
            for b in self.brokers:
                for at in range(w, end, self.shape.watermark_interval_ms):
                    self.watermark(b, at)
        for b in self.brokers:
            for at in range(w + (b.check_phase - w) % self.interval, end, self.interval):
                self.isr_expiration(b, at)
            every = self.shape.propagation_interval_ms
            for at in range(w + (b.propagation_phase - w) % every, end, every):
                self.isr_change_propagation(b, at)

    def watermark(self, b: _Broker, at: int) -> None:
        """`b`'s agent says how far its stream has come: everything it emits later is at or after its clock less the
        slack, but the caught-up repeats it holds until its next isr-expiration run (agent/README.md, Watermark)."""
        self.emit(at, b.id, {"type": "watermark", "ts": at - SLACK_MS, "cluster": self.shape.cluster, "broker": b.id})

    def isr_expiration(self, b: _Broker, at: int) -> None:
        """One isr-expiration run of `b` at `at`: the held repeats, the LEOs it read, its shrinks, its tick."""
        for p in b.led:
            if not p.written:  # each follower's latest caught-up repeat, held until this run
                for f in p.followers:
                    t = at - 1 - (at - 1 - f.phase) % self.step
                    if t > f.last_fetch_ms:
                        self._fetch(at, p, f, t, p.leo)
                continue
            if p.leo != p.reported_leo:
                self.emit(at, b.id, {"type": "append", "ts": at, **self._of(p), "leader_leo": p.leo, "check_ms": at})
                p.reported_leo = p.leo
            lag = self.shape.lag_ms
            out = [
                f for f in p.followers if f.replica in p.isr and f.offset != p.leo and at - f.last_caught_up_ms > lag
            ]
            if out:
                self._shrink(b, at, p, out)
        self.emit(at, b.id, {"type": "tick", "ts": at, "cluster": self.shape.cluster, "broker": b.id} | _EXPIRATION)

    def _shrink(self, b: _Broker, at: int, p: _Partition, out: list[_Follower]) -> None:
        before, gone = p.isr, {f.replica for f in out}
        p.isr = [r for r in before if r not in gone]
        p.epoch += 1
        judged = [
            {
                "replica": f.replica,
                "leo": f.offset,
                "last_caught_up_ms": f.last_caught_up_ms,
                "last_fetch_ms": f.last_fetch_ms,
            }
            for f in out
        ]
        self.emit(
            at,
            b.id,
            {"type": "isr_updated", "ts": at, **self._of(p), "leader": p.leader, "isr": p.isr, "isr_before": before}
            | {"partition_epoch": p.epoch, "kind": "shrink", "out_of_sync": judged}
            | {"check_ms": at, "check_leader_leo": p.leo},
        )
        b.pending.add((p.topic, p.partition))
        b.last_isr_change_ms = at

    def isr_change_propagation(self, b: _Broker, at: int) -> None:
        """ZkAlterPartitionManager.maybePropagateIsrChanges (SPEC §4.6): its tick, then the batch it wrote."""
        shape = self.shape
        due = b.pending and (
            b.last_isr_change_ms + shape.linger_ms < at or b.last_propagation_ms + shape.max_delay_ms < at
        )
        if due:
            b.last_propagation_ms = at
        tick = {"type": "tick", "ts": at, "cluster": shape.cluster, "broker": b.id, "task": "isr-change-propagation"}
        throttle = {"last_isr_change_ms": b.last_isr_change_ms, "last_propagation_ms": b.last_propagation_ms}
        self.emit(at, b.id, tick | {"kafka_version": KAFKA_VERSION} | throttle)
        if due:
            batch = [{"topic": t, "partition": n} for t, n in sorted(b.pending)]
            self.emit(
                at,
                b.id,
                {
                    "type": "isr_change_propagated",
                    "ts": at,
                    "cluster": shape.cluster,
                    "broker": b.id,
                    "partitions": batch,
                },
            )
            b.pending.clear()


_EXPIRATION = {"task": "isr-expiration", "kafka_version": KAFKA_VERSION}


def generate_agent(shape: AgentShape, events: int, seed: int = 7) -> Iterator[dict[str, Any]]:
    """Yield about `events` event dicts in the order the agents emit them."""
    agents = _Agents(shape, seed)
    agents.leader_and_isr()
    emitted = 0
    w = shape.start_ms + shape.fetch_interval_ms
    while emitted < events:
        batch = agents.drain()
        yield from batch
        emitted += len(batch)
        agents.interval_from(w)
        w += shape.fetch_interval_ms
