"""A partition leader's replica bookkeeping (SPEC §1, §4.1-4.5): plain data plus the rules that change it.

Every rule takes the time it runs at and writes what it decided into an `Outputs` collector, so
the same functions serve the one-shot replay and every Spark state key.
"""

from __future__ import annotations

from collections import Counter

from msgspec import Struct

from .events import Append, Fetch, LeaderAndIsr

INF = 2**63 - 1  # "never": larger than any event time


class Follower(Struct, array_like=True, gc=False):
    """The leader's record of one follower (Replica.scala L26-47)."""

    replica: int
    leo: int = -1
    log_start_offset: int = -1
    last_caught_up_ms: int = 0
    last_fetch_leader_leo: int = 0
    last_fetch_ms: int = 0


class Partition(Struct, array_like=True, gc=False):
    """The leader's view of one partition.

    `isr` is kept sorted; `followers` are the records of AR minus the leader, sorted by replica id
    (a short list: it is smaller than a dict and as fast to search at replication factors of 2-5).
    """

    cluster: str
    topic: str
    partition: int
    leader: int | None = None
    leader_epoch: int = -1
    controller_epoch: int = -1
    partition_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    hw: int = 0
    leader_leo: int = 0
    leader_epoch_start_offset: int | None = None
    followers: list[Follower] = []

    def follower(self, replica: int) -> Follower | None:
        for f in self.followers:
            if f.replica == replica:
                return f
        return None

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.cluster, self.topic, self.partition)

    @property
    def has_leader(self) -> bool:
        return self.leader is not None and self.leader >= 0


class IsrChange(Struct, array_like=True, frozen=True, tag="c"):
    """A leader ISR write (expand or shrink) to propagate; the first five fields order it in time.

    Order key (ts, phase, seq, arrival, sub): phase 0 = an input event (or explicit tick) with its
    seq/arrival, 1 = a scheduled isr-expiration check, 2 = a scheduled propagation check; sub 1 = the
    propagation half of an explicit tick, which runs after its isr-expiration half.
    """

    ts: int
    phase: int
    seq: int
    arrival: int
    sub: int
    cluster: str
    broker: int
    topic: str
    partition: int


class PropagationTick(Struct, array_like=True, frozen=True, tag="t"):
    """An explicit isr-change-propagation run for one cluster, ordered like an `IsrChange`."""

    ts: int
    phase: int
    seq: int
    arrival: int
    sub: int
    cluster: str


OrderKey = tuple[int, int, int, int, int]


class Outputs:
    """What advancing the state produced: decisions, ISR changes to propagate, ticks, counters."""

    __slots__ = ("decisions", "changes", "ticks", "ignored_fetches", "ignored_appends", "touched")

    def __init__(self) -> None:
        self.decisions: list[dict] = []
        self.changes: list[IsrChange] = []
        self.ticks: list[PropagationTick] = []
        self.ignored_fetches: Counter[str] = Counter()
        self.ignored_appends: Counter[str] = Counter()
        self.touched: set[tuple[str, str, int]] = set()

    def decide(self, p: Partition, ts: int, kind: str, isr_before: tuple[int, ...], changed: list[int],
               reasons: dict[str, str] | None = None, error: str | None = None) -> None:
        self.touched.add(p.key)
        self.decisions.append({
            "ts": ts, "cluster": p.cluster, "topic": p.topic, "partition": p.partition, "kind": kind,
            "leader": p.leader, "leader_epoch": p.leader_epoch, "isr_before": list(isr_before),
            "isr_after": list(p.isr), "replicas_changed": changed, "reasons": reasons or {},
            "error": error, "hw": p.hw, "leader_leo": p.leader_leo,
        })

    def record_isr_change(self, p: Partition, at: OrderKey) -> None:
        """A successful leader ISR write: new zkVersion, and the change joins the leader's pending set."""
        p.partition_epoch += 1
        self.changes.append(IsrChange(*at, p.cluster, p.leader, p.topic, p.partition))


def maybe_increment_hw(p: Partition, now: int, lag: int) -> None:
    """Partition.maybeIncrementLeaderHW: the HW follows the slowest replica that may still be in sync."""
    new = p.leader_leo
    isr = p.isr
    for f in p.followers:
        leo = f.leo
        if leo < new and (now - f.last_caught_up_ms <= lag or f.replica in isr):
            new = leo
    if new > p.hw:
        p.hw = new


def apply_leader_and_isr(p: Partition, ev: LeaderAndIsr, lag: int, out: Outputs) -> None:
    """ReplicaManager.becomeLeaderOrFollower guards, then Partition.makeLeader."""
    isr_before = p.isr
    if ev.controller_epoch < p.controller_epoch:
        out.decide(p, ev.ts, "rejected", isr_before, [], error="STALE_CONTROLLER_EPOCH")
        return
    p.controller_epoch = ev.controller_epoch
    if ev.leader_epoch <= p.leader_epoch:
        out.decide(p, ev.ts, "rejected", isr_before, [], error="STALE_CONTROLLER_EPOCH")
        return
    if ev.leader >= 0 and ev.leader not in ev.replicas:
        out.decide(p, ev.ts, "rejected", isr_before, [], error="UNKNOWN_TOPIC_OR_PARTITION")
        return
    new_leader = ev.leader != p.leader
    leader_leo = p.leader_leo if ev.leader_leo is None else ev.leader_leo
    isr = tuple(sorted(set(ev.isr)))
    p.leader = ev.leader
    p.leader_epoch = ev.leader_epoch
    p.partition_epoch = ev.partition_epoch
    p.replicas = tuple(ev.replicas)
    p.isr = isr
    p.leader_leo = leader_leo
    p.leader_epoch_start_offset = leader_leo
    followers: list[Follower] = []
    for replica in sorted(ev.replicas):
        if replica == ev.leader:
            continue
        f = (None if new_leader else p.follower(replica)) or Follower(replica)
        if new_leader:
            f.leo = -1
            f.log_start_offset = -1
            f.last_fetch_leader_leo = -1
            f.last_fetch_ms = 0
        else:
            f.last_fetch_leader_leo = leader_leo
            f.last_fetch_ms = ev.ts
        f.last_caught_up_ms = ev.ts if replica in isr else 0
        followers.append(f)
    p.followers = followers
    if ev.hw is not None:
        p.hw = ev.hw
    maybe_increment_hw(p, ev.ts, lag)
    changed = sorted(set(isr_before).symmetric_difference(isr))
    out.decide(p, ev.ts, "leader_and_isr", isr_before, changed)


def _inactive(p: Partition | None) -> str | None:
    """Why a fetch or append is ignored before it is read: no accepted LeaderAndIsr yet, or offline."""
    if p is None or p.leader_epoch < 0:
        return "no_leader_and_isr"
    if p.leader == -1:
        return "offline"
    return None


def apply_fetch(p: Partition | None, ev: Fetch, lag: int, out: Outputs) -> None:
    """Replica.updateFetchState + Partition.updateFollowerFetchState, then maybeExpandIsr and the HW."""
    inactive = _inactive(p)
    if inactive:
        out.ignored_fetches[inactive] += 1
        return
    replica = ev.replica
    f = p.follower(replica)
    if f is None:
        out.ignored_fetches["not_follower"] += 1
        return
    if ev.current_leader_epoch is not None and ev.current_leader_epoch != p.leader_epoch:
        out.ignored_fetches["leader_epoch_mismatch"] += 1
        return
    offset = ev.fetch_offset
    leader_leo = ev.leader_leo
    if offset > leader_leo:
        out.ignored_fetches["offset_out_of_range"] += 1
        return
    t = ev.ts
    if offset >= leader_leo:
        if t > f.last_caught_up_ms:
            f.last_caught_up_ms = t
    elif offset >= f.last_fetch_leader_leo and f.last_fetch_ms > f.last_caught_up_ms:
        f.last_caught_up_ms = f.last_fetch_ms
    leo_changed = f.leo != offset
    f.leo = offset
    if ev.log_start_offset is not None:
        f.log_start_offset = ev.log_start_offset
    f.last_fetch_leader_leo = leader_leo
    f.last_fetch_ms = t
    if leader_leo > p.leader_leo:
        p.leader_leo = leader_leo
    isr = p.isr
    if replica not in isr and offset >= p.hw and offset >= p.leader_epoch_start_offset:
        isr_before = isr
        p.isr = tuple(sorted([*isr, replica]))
        out.record_isr_change(p, (t, 0, ev.seq, ev.arrival, 0))
        if leo_changed:
            maybe_increment_hw(p, t, lag)
        out.decide(p, t, "expand", isr_before, [replica])
    elif leo_changed:
        maybe_increment_hw(p, t, lag)


def apply_append(p: Partition | None, ev: Append, lag: int, out: Outputs) -> None:
    """The leader's LEO only grows on append; a new LEO may let the HW move."""
    inactive = _inactive(p)
    if inactive:
        out.ignored_appends[inactive] += 1
        return
    if ev.leader_leo > p.leader_leo:
        p.leader_leo = ev.leader_leo
    maybe_increment_hw(p, ev.ts, lag)


def check_isr_expiration(p: Partition, now: int, lag: int, out: Outputs, at: OrderKey) -> int:
    """Partition.maybeShrinkIsr at `now`; returns when the next remaining ISR follower becomes eligible.

    A follower expires when it is behind the leader's LEO and has not caught up for more than the
    lag (strict); one exactly at the leader's LEO never expires (KAFKA-7152).
    """
    if not p.has_leader:
        return INF
    leader_leo = p.leader_leo
    next_eligible = INF
    expired: dict[str, str] = {}
    for replica in p.isr:
        f = p.follower(replica)
        if f is None or f.leo == leader_leo:
            continue
        if now - f.last_caught_up_ms > lag:
            expired[str(replica)] = "stuck" if now - f.last_fetch_ms > lag else "slow"
        elif f.last_caught_up_ms + lag + 1 < next_eligible:
            next_eligible = f.last_caught_up_ms + lag + 1
    if expired:
        isr_before = p.isr
        removed = sorted(int(r) for r in expired)
        p.isr = tuple(r for r in isr_before if str(r) not in expired)
        out.record_isr_change(p, at)
        maybe_increment_hw(p, now, lag)
        out.decide(p, now, "shrink", isr_before, removed, reasons=expired)
    return next_eligible
