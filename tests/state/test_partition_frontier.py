"""Each partition on the streams of the brokers acting on it (SPEC §6, `frontier.partition_frontier`): past its
cluster's frontier the one scheduler (`PartitionEngine.advance`) applies a partition's fetches and appends up to where
its leader's, ISR's and ELR's streams have passed, so a follower that every leader shrank out, resumed behind the
others, holds back only what it acts on. Whatever it applied ahead, the outputs equal a one-pass replay's."""

from __future__ import annotations

import msgspec
import pytest

from isrwatch.state.config import Config
from isrwatch.state.engine import PartitionEngine
from isrwatch.state.events import LeaderAndIsr
from isrwatch.state.frontier import behind_partition, partition_frontier
from isrwatch.state.partition import Outputs, Partition, acting_brokers, follower_copy
from isrwatch.state.replay import replay_events
from tests.support.state import fetch, lai, parse_all, tick

AGENT = Config(replica_lag_time_max_ms=5000).with_profile("agent")
PASSED = {1: 3000, 2: 3000, 3: 1000}  # broker 3 just resumed: its stream trails the others'
CLUSTER = 1001  # the cluster's frontier: the least of the streams


def frontier_of(acting: frozenset[int]) -> int:
    return partition_frontier(acting, PASSED, fallback=-1, gone=-1, margin_ms=0, cluster=CLUSTER)


def start() -> list[dict]:
    """t-0: leader 1, broker 3 shrunk out (ISR 1, 2); t-1: leader 2, ISR 1, 2, 3; both at LEO 10."""
    return [
        lai(100, 1, [1, 2], [1, 2, 3], 0, leader_leo=10, broker=1, seq=1),
        lai(100, 2, [1, 2, 3], [1, 2, 3], 0, partition=1, leader_leo=10, broker=2, seq=1),
    ]


def ahead(events: list[dict]) -> tuple[PartitionEngine, Outputs, dict, dict]:
    engine = PartitionEngine(AGENT)
    engine.add(parse_all(events))
    out = engine.advance(CLUSTER, ahead=(frontier_of, max(PASSED.values()) + 1))
    return engine, out, dict(out.ahead), dict(out.exact)


def isr_changes(out: Outputs) -> list[tuple[int, str, list[int]]]:
    return [(d.partition, str(d.kind), d.isr_after) for d in out.decisions if str(d.kind) in ("shrink", "expand")]


def same_as_replay(events: list[dict], engine: PartitionEngine, out: Outputs) -> None:
    """Applying the rest gives the one-pass replay's decisions and final states."""
    engine.advance(10_000, out)
    replayed = replay_events(parse_all(events), AGENT)
    encode = msgspec.json.encode
    assert sorted(encode(d) for d in out.decisions) == sorted(encode(d) for d in replayed.decisions)
    ours = sorted(encode(engine.record(p)) for p in engine.partitions.values())
    assert ours == sorted(encode(r) for r in replayed.records)


def test_the_brokers_acting_on_a_partition_are_its_leader_isr_elr_and_the_holders_of_its_item() -> None:
    p = Partition("c", "t", 0, leader=1, replicas=(1, 2, 3, 4, 5), isr=(1, 2), elr=(4,), held_by=(5,))
    assert acting_brokers(p) == {1, 2, 4, 5}
    assert acting_brokers(Partition("c", "t", 0, leader=-1, replicas=(1, 2, 3))) == {1, 2, 3}  # offline: any replica


def test_a_partition_the_lagging_broker_does_not_act_on_is_applied_up_to_its_own_frontier() -> None:
    events = [
        *start(),
        fetch(1500, 3, 10, 10, current_leader_epoch=0, broker=1, seq=2),  # 3 back at t-0's LEO: expand
        fetch(1500, 3, 10, 10, partition=1, current_leader_epoch=0, broker=2, seq=2),
    ]
    engine, out, applied, exact = ahead(events)
    assert isr_changes(out) == [(0, "expand", [1, 2, 3])]
    assert applied == {("default", "t", 0): 1500}
    # From its expand on, broker 3 acts on t-0: its state is exact only up to where 3's stream has passed.
    assert exact == {("default", "t", 0): CLUSTER}
    assert [ev.partition for ev in engine.buffer] == [1]  # t-1's ISR holds 3: it waits for 3's stream
    same_as_replay(events, engine, out)


def test_once_a_fetch_adds_the_lagging_broker_its_partition_waits_for_that_broker() -> None:
    events = [
        *start(),
        fetch(1500, 3, 10, 10, current_leader_epoch=0, broker=1, seq=2),
        fetch(1600, 2, 10, 10, current_leader_epoch=0, broker=1, seq=3),
    ]
    engine, out, applied, _ = ahead(events)
    assert applied == {("default", "t", 0): 1500}
    assert [ev.ts for ev in engine.buffer] == [1600]
    same_as_replay(events, engine, out)


def test_a_brokers_tick_goes_past_the_cluster_s_frontier_with_the_partitions_it_leads() -> None:
    events = [*start(), tick(1400, "isr-expiration", broker=1, seq=2), fetch(1500, 3, 10, 10, broker=1, seq=3)]
    engine, out, applied, _ = ahead(events)
    assert applied == {("default", "t", 0): 1500} and isr_changes(out) == [(0, "expand", [1, 2, 3])]
    same_as_replay(events, engine, out)


def two_led_by_2(tick_fields: dict) -> list[dict]:
    """Broker 2 leads t-1 (whose ISR holds the lagging 3) and t-2 (ISR 1, 2); its tick at 1400, a fetch of t-2 after."""
    return [
        *start(),
        lai(100, 2, [1, 2], [1, 2, 3], 0, partition=2, leader_leo=10, broker=2, seq=2),
        tick(1400, "isr-expiration", broker=2, seq=3, **tick_fields),
        fetch(1500, 3, 10, 10, partition=2, broker=2, seq=4),
    ]


def test_each_partition_that_goes_takes_its_share_of_its_leader_s_run() -> None:
    """Broker 2's isr-expiration run reads t-1, which waits for the lagging 3, and t-2, which does not: t-2 takes its
    share of the run and goes on; the tick waits for t-1, and then skips t-2 (`PartitionEngine.checked_ahead`)."""
    events = two_led_by_2({})
    engine, out, applied, _ = ahead(events)
    assert applied == {("default", "t", 2): 1500} and isr_changes(out) == [(2, "expand", [1, 2, 3])]
    assert engine.checked_ahead == {("default", "t", 2): (1400,)}
    assert [type(ev).__name__ for ev in engine.buffer] == ["Tick"]
    same_as_replay(events, engine, out)
    assert engine.checked_ahead == {}


def test_a_tick_that_tells_new_rules_waits_and_holds_back_all_its_broker_leads() -> None:
    """Its first Kafka version: every partition 2 leads reads it, so none goes past the tick before the tick goes."""
    events = two_led_by_2({"kafka_version": "3.9.2"})
    engine, out, applied, _ = ahead(events)
    assert applied == {} and not isr_changes(out)
    assert [type(ev).__name__ for ev in engine.buffer] == ["Tick", "Fetch"]
    same_as_replay(events, engine, out)


def test_a_tick_waits_for_a_partition_state_that_moves_a_leadership_to_its_broker() -> None:
    """t-1's new state makes 1 its leader: 1's tick after it must read t-1 too, so it waits with the state."""
    events = [
        *start(),
        lai(1300, 1, [1, 2, 3], [1, 2, 3], 1, partition=1, leader_leo=10, broker=1, seq=2),
        tick(1400, "isr-expiration", broker=1, seq=3),
    ]
    engine, out, applied, _ = ahead(events)
    assert applied == {} and [type(ev).__name__ for ev in engine.buffer] == ["LeaderAndIsr", "Tick"]
    same_as_replay(events, engine, out)


def test_a_new_run_of_any_broker_holds_back_every_partition() -> None:
    """Its first event forgets what every partition held of it (`forget_partition`): nothing after it goes ahead."""
    events = [*start(), tick(1200, "isr-expiration", broker=2, seq=1_200_000), fetch(1500, 3, 10, 10, broker=1, seq=2)]
    engine, out, applied, _ = ahead(events)
    assert applied == {} and len(engine.buffer) == 2
    same_as_replay(events, engine, out)


def test_a_follower_copy_holds_nothing_back_and_is_never_late_for_its_partition() -> None:
    copy = parse_all([lai(1400, 1, [1, 2], [1, 2, 3], 0, broker=3, seq=9)])[0]
    assert isinstance(copy, LeaderAndIsr) and follower_copy(copy)
    events = [*start(), lai(1400, 1, [1, 2], [1, 2, 3], 0, broker=3, seq=9), fetch(1500, 3, 10, 10, broker=1, seq=2)]
    _, out, applied, _ = ahead(events)
    assert applied == {("default", "t", 0): 1500} and isr_changes(out) == [(0, "expand", [1, 2, 3])]


def test_an_event_at_or_behind_where_its_partition_was_applied_ahead_is_late() -> None:
    assert behind_partition(1500, 1500) and behind_partition(1400, 1500)
    assert not behind_partition(1501, 1500) and not behind_partition(1400, None)


@pytest.mark.parametrize("learned", [False, True])
def test_a_deposed_leader_acts_on_its_partition_until_it_reports_the_new_state(learned: bool) -> None:
    """Broker 3 led t-0 until a new state made 1 its leader without 3 in the ISR: until 3 reports that state (a
    follower's copy), it may still report as t-0's leader, so t-0 waits for 3's stream; after, it does not."""
    events = [
        lai(100, 3, [1, 2, 3], [1, 2, 3], 0, leader_leo=10, broker=3, seq=1),
        lai(500, 1, [1, 2], [1, 2, 3], 1, leader_leo=10, broker=1, seq=1),
        *([lai(600, 1, [1, 2], [1, 2, 3], 1, broker=3, seq=2)] if learned else []),
        fetch(1500, 2, 10, 10, current_leader_epoch=1, broker=1, seq=2),
    ]
    engine, out, applied, _ = ahead(events)
    assert engine.deposed.get(("default", "t", 0), ()) == (() if learned else (3,))
    assert applied == ({("default", "t", 0): 1500} if learned else {})
    same_as_replay(events, engine, out)
