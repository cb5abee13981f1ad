"""The live audit (SPEC §7): what the model decided against what each broker observably did.

With agent input every leader reports its real ISR writes (`isr_updated`) and its real
`/isr_change_notification` writes (`isr_change_propagated`). The engine hands the audit the model's
own ISR writes (`IsrWrite`, with the evidence it judged on) and each broker write with the model's view of
the partition at that moment (`Observation`); the propagation book hands it the model's batches.

Pairing:
- an ISR write pairs with the broker's write of the same cluster, leader, partition and partition epoch
  (the zkVersion the write created);
- a batch pairs with the broker's znode of the same cluster and broker at the same time (the agent's
  propagation tick and its write carry the run's one `now`).

A side left without a partner once its cluster's time has passed it by `audit_window_ms`, or a pair
that disagrees, is a `Divergence`. Some disagreements are timing, not error, and say so (`timing`, with
the margin):
- Kafka reads its clock per partition a few ms after its task starts, so a shrink that hinges on less
  than `audit_timing_ms` goes either way;
- the model takes an ISR write as done when decided; Kafka's ZooKeeper write takes time, and until it
  commits no other ISR change of the partition starts (Partition.scala `isInflight`), so a model write
  decided before the broker's previous write of that partition committed may differ;
- a broker puts a change in its batch set when its write commits (ZkAlterPartitionManager.scala L74-79); the
  book follows the broker's reported clocks at each run, but a commit may still fall on the other side of a run
  than the model's view of it, so a change may go one batch earlier or later.
Like the engine and the book, the audit advances "up to W" per cluster and serialises, so any cut of the input
gives the same divergences.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import msgspec
from msgspec import Struct

from .config import Config
from .events import IsrChangePropagated, IsrUpdated
from .records import (
    DecisionKind,
    Divergence,
    DivergenceKind,
    IsrWrite,
    Observation,
    Propagation,
    ReplicaView,
)

STATE_VERSION = 2


class _AuditState(Struct, array_like=True):
    version: int
    writes: list[IsrWrite]
    observed: list[Observation]
    batches: list[Propagation]
    propagated: list[IsrChangePropagated]
    spans: list[tuple[str, int, str, int, int, int]]  # (cluster, broker, topic, partition, lo, hi): see `spans`
    commits: list[tuple[str, int, str, int, int, int]]  # (cluster, leader, topic, partition, epoch, ts)
    reporting: list[tuple[str, int]]  # (cluster, broker): leaders whose writes are audited (the agent's)
    splits: list[tuple[str, str, int, int]] = []  # (cluster, topic, partition, ts): see `splits`
    resyncs: list[tuple[str, str, int, int]] = []  # (cluster, topic, partition, ts): see `resyncs`
    sent: list[tuple[str, int, str, int, int, bool]] = []  # (cluster, broker, topic, partition, ts, by broker)


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(_AuditState)
IsrKey = tuple[str, int, str, int, int]  # (cluster, leader, topic, partition, partition epoch)
PartitionKey = tuple[str, int, str, int]  # (cluster, leader, topic, partition)
BatchKey = tuple[str, int, int]  # (cluster, broker, ts)
K = TypeVar("K")
SortedKey = TypeVar("SortedKey", bound=tuple[Any, ...])  # a key that orders ties
T = TypeVar("T")
A = TypeVar("A", bound="IsrWrite | Observation")
B = TypeVar("B", bound="IsrWrite | Observation")


def _write_key(w: IsrWrite) -> IsrKey:
    return (w.cluster, w.broker, w.topic, w.partition, w.partition_epoch)


def _observed_key(o: Observation) -> IsrKey:
    ev = o.event
    return (ev.cluster, ev.leader, ev.topic, ev.partition, ev.partition_epoch)


def _batch_key(b: Propagation | IsrChangePropagated) -> BatchKey:
    return (b.cluster, b.broker, b.ts)


def _meet(key: K, side: A, waiting: dict[K, A], partners: dict[K, B]) -> B | None:
    """The other side's partner of `side` under `key` (the same partition epoch) that agrees on kind and new ISR,
    taken out of `partners`; without one, `side` waits: a partner that differs may be another epoch's, and is
    judged when due."""
    partner = partners.get(key)
    if partner is None or _side(partner)[:2] != _side(side)[:2]:
        waiting[key] = side
        return None
    return partners.pop(key)


def _decided_at(ev: IsrUpdated) -> int:
    """When the broker decided: a shrink's check clock (the agent reports it), else the write's time."""
    return ev.check_ms if ev.kind == "shrink" and ev.check_ms is not None else ev.ts


def _side(side: IsrWrite | Observation) -> tuple[DecisionKind, list[int], int]:
    """A side's kind, new ISR (sorted) and time."""
    if isinstance(side, Observation):
        return DecisionKind(side.event.kind), sorted(side.event.isr), side.event.ts
    return side.kind, side.isr, side.ts


def _nearest_alike(
    key: IsrKey,
    side: tuple[DecisionKind, list[int], int],
    others: Mapping[IsrKey, IsrWrite] | Mapping[IsrKey, Observation],
    window: int,
) -> IsrKey | None:
    """Of `others`, the write of `key`'s partition with `side`'s kind and ISR nearest to it in time, within `window`."""
    return nearest_alike(side, ((k, _side(o)) for k, o in others.items() if k[:4] == key[:4]), window)


def nearest_alike(
    side: tuple[DecisionKind, list[int], int],
    others: Iterable[tuple[SortedKey, tuple[DecisionKind, list[int], int]]],
    window: int,
) -> SortedKey | None:
    """How a write is paired when partition epochs cannot pair it: of `others` (one partition's writes, each a key
    and its kind, new ISR (sorted) and time), the key of the one with `side`'s kind and ISR nearest to it in time
    within `window` (ties: the smaller key). The latency benchmark pairs the brokers' writes with it too."""
    kind, isr, ts = side
    best: tuple[int, SortedKey] | None = None
    for other_key, (other_kind, other_isr, other_ts) in others:
        if other_kind is kind and other_isr == isr and abs(other_ts - ts) <= window:
            candidate = (abs(other_ts - ts), other_key)
            best = candidate if best is None or candidate < best else best
    return None if best is None else best[1]


class Audit:
    """Pending sides of every audited write and batch, paired as they come and judged once settled."""

    def __init__(self, config: Config, blob: bytes | None = None) -> None:
        self.lag = config.replica_lag_time_max_ms
        self.window = config.audit_window
        self.timing_ms = config.audit_timing_ms
        self.linger = config.isr_change_linger_ms
        # Kafka runs isr-change-propagation every 2.5 s (ReplicaManager.scala, ZooKeeper mode); the agent profile
        # sets no period of the model's own.
        self.propagation_period = config.isr_change_check_interval_ms or 2500
        # A batch carries a change at most the max delay after it; the batch is judged a window later.
        self.max_delay = config.isr_change_max_delay_ms
        self.kept = self.max_delay + self.window
        self.writes: dict[IsrKey, IsrWrite] = {}
        self.observed: dict[IsrKey, Observation] = {}
        self.batches: dict[BatchKey, Propagation] = {}
        self.propagated: dict[BatchKey, IsrChangePropagated] = {}
        # Per partition, the times each recent ISR change has on the two sides (model decision, broker commit):
        # a batch decided between their linger deadlines may differ by it.
        self.spans: dict[PartitionKey, list[tuple[int, int]]] = {}
        self.commits: dict[IsrKey, int] = {}  # when each broker write committed (its `ts`)
        self.reporting: set[tuple[str, int]] = set()
        # Per partition, when a timing divergence split the model's view of its ISR from the broker's, and when a
        # LeaderAndIsr took the controller's state again (both sides start from it): in between, the two sides'
        # writes follow different ISRs, and a divergence there is a consequence of the split (timing).
        self.splits: dict[tuple[str, str, int], int] = {}
        self.resyncs: dict[tuple[str, str, int], list[int]] = {}
        # Per partition, the batches each side sent it in (ts, by the broker): see `_displaced`.
        self.sent: dict[PartitionKey, list[tuple[int, bool]]] = {}
        if blob is not None:
            state = _decoder.decode(blob)
            if state.version != STATE_VERSION:
                raise ValueError(f"audit state version {state.version} is not {STATE_VERSION}")
            self.writes = {_write_key(w): w for w in state.writes}
            self.observed = {_observed_key(o): o for o in state.observed}
            self.batches = {_batch_key(b): b for b in state.batches}
            self.propagated = {_batch_key(p): p for p in state.propagated}
            for t in state.spans:
                self.spans.setdefault(t[:4], []).append((t[4], t[5]))
            self.commits = {t[:5]: t[5] for t in state.commits}
            self.reporting = set(state.reporting)
            self.splits = {t[:3]: t[3] for t in state.splits}
            for cluster, topic, partition, ts in state.resyncs:
                self.resyncs.setdefault((cluster, topic, partition), []).append(ts)
            for cluster, broker, topic, partition, ts, by_broker in state.sent:
                self.sent.setdefault((cluster, broker, topic, partition), []).append((ts, by_broker))

    def to_bytes(self) -> bytes:
        return _encoder.encode(
            _AuditState(
                STATE_VERSION,
                list(self.writes.values()),
                list(self.observed.values()),
                list(self.batches.values()),
                list(self.propagated.values()),
                [(*k, *span) for k, spans in self.spans.items() for span in spans],
                [(*k, ts) for k, ts in self.commits.items()],
                sorted(self.reporting),
                [(*k, ts) for k, ts in self.splits.items()],
                [(*k, ts) for k, times in self.resyncs.items() for ts in times],
                [(*k, ts, by_broker) for k, sends in self.sent.items() for ts, by_broker in sends],
            )
        )

    def pending(self) -> int:
        """Sides still waiting for a partner or for their cluster's time to pass the window."""
        return len(self.writes) + len(self.observed) + len(self.batches) + len(self.propagated)

    def add(
        self,
        writes: Iterable[IsrWrite] = (),
        observed: Iterable[Observation | IsrChangePropagated] = (),
        batches: Iterable[Propagation] = (),
        resyncs: Iterable[tuple[str, str, int, int]] = (),
    ) -> list[Divergence]:
        """Take new sides; ISR writes that find their partner are judged at once (batches wait for `advance`:
        their verdict may rest on ISR timing divergences not yet judged). Only the batches of brokers that
        report (whose writes are audited or who reported writes) are audited."""
        out: list[Divergence] = []
        for cluster, topic, partition, ts in resyncs:  # (cluster, topic, partition, ts) of the model's LeaderAndIsr
            self.resyncs.setdefault((cluster, topic, partition), []).append(ts)
        for w in writes:
            self.reporting.add((w.cluster, w.broker))
            partner = _meet(_write_key(w), w, self.writes, self.observed)
            if partner is not None:
                self._judge_pair(w, partner, out)
        for o in observed:
            if isinstance(o, IsrChangePropagated):
                self.propagated[_batch_key(o)] = o
                self.reporting.add(_batch_key(o)[:2])
                self._record_sent(o, by_broker=True)
                continue
            key = _observed_key(o)
            self.reporting.add(key[:2])
            self.commits[key] = o.event.ts
            mine = _meet(key, o, self.observed, self.writes)
            if mine is not None:
                self._judge_pair(mine, o, out)
        for b in batches:
            if (b.cluster, b.broker) in self.reporting:
                self.batches[_batch_key(b)] = b
                self._record_sent(b, by_broker=False)
        return out

    def _record_sent(self, batch: Propagation | IsrChangePropagated, by_broker: bool) -> None:
        for tp in batch.partitions:
            key = (batch.cluster, batch.broker, tp.topic, tp.partition)
            self.sent.setdefault(key, []).append((batch.ts, by_broker))

    def advance(self, until: int | Mapping[str, int]) -> list[Divergence]:
        """Judge every side its cluster's time (`until`: one for all, or one per cluster) has passed by the
        window: ISR writes first, then batches."""
        out: list[Divergence] = []

        def due(cluster: str, ts: int) -> bool:
            at = until if isinstance(until, int) else until.get(cluster)
            return at is not None and ts + self.window < at

        for key, w in sorted(self.writes.items()):  # sorted: the same order whatever the arrival
            if due(w.cluster, w.ts):
                del self.writes[key]
                partner = self._partner(key, w, self.observed, self.writes)
                if partner is None:
                    self._judge_write_alone(w, out)
                else:
                    self._judge_pair(w, self.observed.pop(partner), out)
        for key, o in sorted(self.observed.items()):
            if due(o.event.cluster, o.event.ts):
                del self.observed[key]
                mine = self._partner(key, o, self.writes, self.observed)
                if mine is None:
                    self._judge_observed_alone(o, out)
                else:
                    self._judge_pair(self.writes.pop(mine), o, out)
        for batch in sorted(set(self.batches) | set(self.propagated)):
            if due(batch[0], batch[2]):
                self._judge_batch(batch, self.batches.pop(batch, None), self.propagated.pop(batch, None), out)
        _prune(self.spans, lambda partition, span: not due(partition[0], span[1] + self.kept))
        for where, times in list(self.resyncs.items()):
            kept_times = [ts for ts in times if not due(where[0], ts + self.kept)]
            if kept_times:
                self.resyncs[where] = kept_times
            else:
                del self.resyncs[where]
            split = self.splits.get(where)
            if split is not None and any(split < ts for ts in times) and due(where[0], max(times) + self.kept):
                del self.splits[where]
        for write, ts in list(self.commits.items()):
            if due(write[0], ts + self.kept):
                del self.commits[write]
        _prune(self.sent, lambda partition, send: not due(partition[0], send[0] + self.kept))
        return out

    def _partner(
        self,
        key: IsrKey,
        side: IsrWrite | Observation,
        others: Mapping[IsrKey, IsrWrite] | Mapping[IsrKey, Observation],
        mine: Mapping[IsrKey, IsrWrite] | Mapping[IsrKey, Observation],
    ) -> IsrKey | None:
        """The other side's write a settled side is judged with. First one of the same partition, kind and new ISR
        within the window, at any partition epoch: once one write is missed or extra, the model's epochs run off
        the broker's until the next LeaderAndIsr, and the writes after it still match (the nearest in time). Else
        the write of the same epoch, unless that one has such a match of its own among this side's."""
        drifted = _nearest_alike(key, _side(side), others, self.window)
        if drifted is not None:
            return drifted
        same = others.get(key)
        if same is None or _nearest_alike(key, _side(same), mine, self.window) is not None:
            return None
        return key

    # The verdicts
    # The verdicts

    def _margin(self, evidence: list[ReplicaView], at: int, replicas: Iterable[int]) -> int | None:
        """How far past the lag limit the first of `replicas` to pass it was at `at`, by the model's record."""
        concerned = set(replicas)
        margins = [at - r.last_caught_up_ms - self.lag for r in evidence if r.replica in concerned]
        return max(margins) if margins else None

    def _is_timing(self, margin: int | None) -> bool:
        return margin is not None and abs(margin) <= self.timing_ms

    def _in_flight(self, w: IsrWrite, after_ms: int = 0) -> int | None:
        """How long before the broker's previous write of the partition committed the model made `w` (negative
        ms), if it did: Kafka starts no ISR change while one is in flight. With `after_ms`, also a write made up to
        that long after the commit (positive ms)."""
        committed = self.commits.get((w.cluster, w.broker, w.topic, w.partition, w.partition_epoch - 1))
        return None if committed is None or w.ts - committed > after_ms else w.ts - committed

    def _judge_pair(self, w: IsrWrite, o: Observation, out: list[Divergence]) -> None:
        ev = o.event
        self._span(_write_key(w), min(w.ts, ev.ts), max(w.ts, ev.ts))
        if str(w.kind) != ev.kind or w.isr != sorted(ev.isr):
            # Two expands right after a write: Kafka runs the HW rule when a write commits (3.1+,
            # handleAlterPartitionUpdate, Partition.scala 3.9 L1953-1981), the model when it decides, so which
            # follower is back at the HW first may differ by the write's latency.
            both_expand = w.kind is DecisionKind.EXPAND and ev.kind == "expand"
            early = self._in_flight(w, self.timing_ms if both_expand else 0)
            kind = DivergenceKind.DIFFERENT_ISR if early is None else DivergenceKind.TIMING
            out.append(self._isr_divergence(kind, w, o, early))
            return
        if self._in_flight(w) is not None:
            # The same write, but the model made it while the broker's previous one was in flight: the followers
            # it saw then are not the ones Kafka saw after the commit, so the two views are split from here.
            self._split((w.cluster, w.topic, w.partition), w.ts)
        broker_at = _decided_at(ev)
        if w.kind is DecisionKind.EXPAND:
            if w.ts <= ev.ts + self.timing_ms:
                return  # the same fetch: the broker's write lands after the model's decision
            out.append(self._isr_divergence(DivergenceKind.MISSED_BY_MODEL, w, o, None))
            return
        if w.ts - self.timing_ms <= broker_at <= (w.run_end_ms or w.ts) + self.timing_ms:
            return  # the same run: the broker checked this partition within it
        removed = [int(r) for r in w.reasons]
        if w.ts < broker_at:  # the model shrank first; the broker did not at that run
            margin = self._margin(w.evidence, w.ts, removed)
            kind = DivergenceKind.UNEXPLAINED_BY_MODEL
        else:  # the broker shrank first; the model only at a later run
            margin = self._margin(o.evidence, broker_at, [r.replica for r in ev.out_of_sync])
            kind = DivergenceKind.MISSED_BY_MODEL
        out.append(self._isr_divergence(DivergenceKind.TIMING if self._is_timing(margin) else kind, w, o, margin))

    def _judge_write_alone(self, w: IsrWrite, out: list[Divergence]) -> None:
        margin = self._in_flight(w)
        if margin is None:
            margin = self._margin(w.evidence, w.ts, [int(r) for r in w.reasons]) if w.reasons else None
            if not self._is_timing(margin):
                out.append(self._isr_divergence(DivergenceKind.UNEXPLAINED_BY_MODEL, w, None, margin))
                return
        self._span(_write_key(w), w.ts, w.ts)  # a timing: the batches may differ by it
        out.append(self._isr_divergence(DivergenceKind.TIMING, w, None, margin))

    def _judge_observed_alone(self, o: Observation, out: list[Divergence]) -> None:
        ev = o.event
        margin = None
        if ev.kind == "shrink":
            margin = self._margin(o.evidence, _decided_at(ev), [r.replica for r in ev.out_of_sync])
        if not self._is_timing(margin):
            out.append(self._isr_divergence(DivergenceKind.MISSED_BY_MODEL, None, o, margin))
            return
        self._span(_observed_key(o), ev.ts, ev.ts)
        out.append(self._isr_divergence(DivergenceKind.TIMING, None, o, margin))

    def _span(self, write: IsrKey, lo: int, hi: int) -> None:
        self.spans.setdefault(write[:4], []).append((lo, hi))

    def _shifted(self, at: int, spans: list[tuple[int, int]]) -> bool:
        """Whether a batch at `at` may carry a change or not depending on which side's time of it counts: at or
        after the change on one side (a run in the same ms as the model's decision may come after it) and not yet
        by the next propagation run past its linger deadline on the other (a batch forced by the max delay takes
        it at once)."""
        return any(lo <= at <= hi + self.linger + self.propagation_period for lo, hi in spans)

    def _displaced(self, partition: PartitionKey, at: int, by_broker: bool) -> bool:
        """Whether a batch at `at` (the broker's, or the model's) carries a change of the partition the other side
        sent in an earlier batch, within the max delay, with no send of it by this side since: the same change in
        another run. A change committed during a slow isr-expiration run goes in the broker's batch of a
        propagation run inside it; the model, which has it from the run's end, sends it with its next batch, which
        later changes can keep back past the linger deadline `_shifted` allows for."""
        sends = self.sent.get(partition, [])
        earlier = [ts for ts, side in sends if side != by_broker and at - self.max_delay <= ts < at]
        if not earlier:
            return False
        twin = max(earlier)
        return not any(side == by_broker and twin <= ts < at for ts, side in sends)

    def _split(self, partition: tuple[str, str, int], ts: int) -> None:
        """A timing divergence at `ts`: from there the two sides' views of the partition's ISR may differ."""
        self.splits[partition] = min(ts, self.splits.get(partition, ts))

    def _split_at(self, partition: tuple[str, str, int], ts: int) -> bool:
        """Whether the partition's views were split at `ts`: a timing divergence before it, and no LeaderAndIsr
        in between (the controller's state, which both sides take verbatim, joins them again)."""
        split = self.splits.get(partition)
        if split is None or ts < split:
            return False
        return not any(split < resync <= ts for resync in self.resyncs.get(partition, ()))

    def _isr_divergence(
        self, kind: DivergenceKind, w: IsrWrite | None, o: Observation | None, margin: int | None
    ) -> Divergence:
        ev = o.event if o is not None else None
        times = [side.ts for side in (w, ev) if side is not None]
        if w is not None:
            cluster, broker, topic, partition, epoch = _write_key(w)
        else:
            assert o is not None
            cluster, broker, topic, partition, epoch = _observed_key(o)
        if kind is DivergenceKind.TIMING:
            self._split((cluster, topic, partition), min(times))
        elif self._split_at((cluster, topic, partition), min(times)):
            kind = DivergenceKind.TIMING
        return Divergence(
            ts=min(times),
            cluster=cluster,
            broker=broker,
            kind=kind,
            subject="isr",
            topic=topic,
            partition=partition,
            partition_epoch=epoch,
            model=w,
            observed=ev,
            evidence=(o.evidence if o is not None else []) if w is None or not w.evidence else w.evidence,
            margin_ms=margin,
        )

    def _judge_batch(
        self, key: BatchKey, b: Propagation | None, p: IsrChangePropagated | None, out: list[Divergence]
    ) -> None:
        model = {(tp.topic, tp.partition) for tp in b.partitions} if b else set()
        broker = {(tp.topic, tp.partition) for tp in p.partitions} if p else set()
        if b is not None and p is not None and model == broker:
            return
        cluster, who, ts = key
        differ = model ^ broker
        if all(
            self._shifted(ts, self.spans.get((cluster, who, t, n), []))
            or self._split_at((cluster, t, n), ts)
            or self._displaced((cluster, who, t, n), ts, by_broker=(t, n) in broker)
            for t, n in differ
        ):
            kind = DivergenceKind.TIMING
        elif b is None:
            kind = DivergenceKind.MISSED_BY_MODEL
        elif p is None:
            kind = DivergenceKind.UNEXPLAINED_BY_MODEL
        else:
            kind = DivergenceKind.DIFFERENT_BATCH
        out.append(
            Divergence(ts=ts, cluster=cluster, broker=who, kind=kind, subject="propagation", model=b, observed=p)
        )


def _prune(by_key: dict[K, list[T]], keep: Callable[[K, T], bool]) -> None:
    """Keep, per key, the items `keep` accepts; a key left without any goes."""
    for key, items in list(by_key.items()):
        kept = [item for item in items if keep(key, item)]
        if kept:
            by_key[key] = kept
        else:
            del by_key[key]


def sorted_divergences(divergences: Iterable[Divergence]) -> list[Divergence]:
    """A stable order for outputs: by time, cluster, broker, partition."""
    return sorted(
        divergences, key=lambda d: (d.ts, d.cluster, d.broker, d.subject, d.topic or "", d.partition or -1, d.kind)
    )
