"""How far a stream may apply a cluster's events (SPEC §6): the cluster's frontier at a state key.

A stream cannot know that no older event is on its way, so it applies a cluster's events only behind a frontier
that no event still to come is at or behind (such an event is `late`). Two things bound what is still to come:
- the cluster's time (its newest corroborated event time) less `allowed_lateness_ms`, the *fallback*: what
  input without a broker of its own (files, the simulator) has, and every cluster before its brokers' watermarks;
- each reporting broker's own stream: the agent's `watermark` W says every later event of that broker has
  `ts` >= W (`broker_passed`).
When every source of a cluster is a broker that sends watermarks, the frontier is where the slowest of their
streams has passed (`brokers_frontier`): a shrink is shown as soon as every broker's stream has passed it, with no
fixed lateness wait. A broker whose stream stopped (stalled, stopped, dead) holds back what it acts on until it
resumes, for up to `broker_stall_wait_ms` (`holds_back`): the events its agent captured just before it stopped come
when it resumes, and are applied in their place. While one is away the frontier keeps a margin for its return
(`rejoin_margin`).

Within a cluster, each partition may go further, to its own frontier (`partition_frontier`): where the streams of
the brokers that can still change it (`partition.acting_brokers`: its leader, its ISR and ELR, the holders of its
AlterPartition item) have passed. A follower that every leader shrank out of its ISRs, just resumed from a stall,
then holds back only its own partitions, and the leaders' expands of it are shown as soon as their streams pass them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping


def broker_passed(watermark: int) -> int:
    """How far a broker's stream has passed, given its newest watermark: every later event of it has `ts` >=
    `watermark`, so none is at or behind `watermark - 1` (an event at or behind the frontier is late)."""
    return watermark - 1


def holds_back(passed: int, gone: int) -> bool:
    """Whether a broker's stream, passed up to `passed`, holds its cluster's frontier back: while it is ahead of
    `gone` (`stall_bound`). A broker whose stream stopped may be stalled (a GC pause, SIGSTOP) and resume with the
    events its agent captured just before, dated then: it holds back until it resumes, so those are applied in their
    place, as the replay applies them. Kafka itself keeps a silent broker's leaderships and ISR memberships until its
    session expires (zookeeper.session.timeout.ms, 18 s by default since KIP-537, Kafka 2.5; in KRaft
    broker.session.timeout.ms, 9 s). One that died would otherwise hold the partitions it acts on back forever; past
    `gone` its events are judged on the frontier as any event is."""
    return passed > gone


def stall_bound(newest: int, lateness: int, stall_wait_ms: int) -> int:
    """Where a broker's stream, passed up to there or behind, holds nothing back: `broker_stall_wait_ms` behind its
    cluster's time `newest`, and never less than the fallback's `allowed_lateness_ms`."""
    return newest - max(lateness, stall_wait_ms)


def rejoin_margin(away: bool, margin_ms: int) -> int:
    """How far the frontier stays behind the brokers that hold it back while another broker is away (fell behind,
    or is named by the cluster's metadata and sent no watermark yet: starting, restarting, or without the agent):
    when it comes back, its first events (sent as its agent reconnects) arrive up to `broker_rejoin_margin_ms`
    after they happened, and must not find the frontier already past them."""
    return margin_ms if away else 0


def brokers_frontier(
    passed: Mapping[int, int], named: Collection[int], fallback: int, gone: int, margin_ms: int
) -> int:
    """The least of the streams that hold the cluster back (`holds_back` past `gone`), less the rejoin margin when a
    named or watermarking broker is away; the fallback when no stream holds it back."""
    holding = {broker: p for broker, p in passed.items() if holds_back(p, gone)}
    if not holding:
        return fallback
    away = len(holding) < len(passed) or any(b not in holding for b in named)
    return max(gone, min(holding.values()) - rejoin_margin(away, margin_ms))


def cluster_frontier(
    newest: int,
    lateness: int,
    stall_wait_ms: int,
    margin_ms: int,
    watermarks: Mapping[int, int] | None,
    reporters: Collection[int],
    named: Collection[int],
    unbounded: bool,
) -> int:
    """A cluster's frontier at a state key: events before it are applied, events at or behind it that still come
    are late. `newest`: the cluster's time; `watermarks`: each broker's newest watermark the key took; `reporters`:
    the brokers whose events the key took; `named`: the brokers the key's metadata names (replicas, leaders,
    registrations); `unbounded`: the key took an event of the cluster without a broker (a file, the simulator).
    Only when every source bounds its own stream (every reporter sends watermarks, and no event comes without a
    broker) do the brokers' streams move the frontier past the fallback `newest - lateness`."""
    fallback = newest - lateness
    passed = streams_passed(watermarks, reporters, unbounded)
    if passed is None:
        return fallback
    return brokers_frontier(passed, named, fallback, stall_bound(newest, lateness, stall_wait_ms), margin_ms)


def streams_passed(
    watermarks: Mapping[int, int] | None, reporters: Collection[int], unbounded: bool
) -> dict[int, int] | None:
    """How far each broker's stream has passed, when every source of the cluster bounds its own stream (every reporter
    sends watermarks, and no event came without a broker); None: the cluster has only the fallback."""
    if unbounded or not watermarks or any(b not in watermarks for b in reporters):
        return None
    return {b: broker_passed(w) for b, w in watermarks.items()}


def partition_frontier(
    acting: Collection[int], passed: Mapping[int, int], fallback: int, gone: int, margin_ms: int, cluster: int
) -> int:
    """How far a partition may be applied: `brokers_frontier` over the brokers acting on it (`acting_brokers`), never
    behind its cluster's frontier `cluster`. Another broker's stream cannot change it (a follower's copy of its state
    only counts), so a broker away, or behind, that does not act on it holds it back no more than one that does."""
    mine = {b: passed[b] for b in acting if b in passed}
    return max(cluster, brokers_frontier(mine, acting, fallback, gone, margin_ms))


def behind_partition(at: int, ahead: int | None) -> bool:
    """Whether an event of a partition that sorts at `at` is late for it: at or behind the last event the partition
    applied past its cluster's frontier (`ahead`). Only a broker that did not act on the partition can send one (the
    acting brokers' streams had passed it): the new leader of an unclean election (a replica outside the ISR and ELR;
    Kafka elects one only with unclean.leader.election.enable), or a broker that came back from away more than
    `broker_rejoin_margin_ms` late. Like any late event it changes nothing and is a dead letter; a follower's copy of
    the partition's state is not one of these (it changes nothing wherever it is applied)."""
    return ahead is not None and at <= ahead
