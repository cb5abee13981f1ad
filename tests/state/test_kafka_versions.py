"""SPEC §4.8: the rule sets per Kafka version (`kafka_version`), each difference shown on the same events.

Every test runs the events under the 2.x rules the public scenarios test ("2.6") and under the lab's brokers'
("3.9", what Kafka 3.9.2 in ZooKeeper mode with inter.broker.protocol.version=2.6 runs), and cites the Kafka
source line that makes them differ, as `File@tag Lx` (apache/kafka, core/src/main/scala/kafka/cluster/).
"""

from __future__ import annotations

import pytest

from isrwatch.state.config import Config, ConfigError, KafkaRules, kafka_rules
from isrwatch.state.engine import STATE_VERSION, PartitionEngine
from isrwatch.state.partition import Outputs
from isrwatch.state.step import by_reason
from tests.support.state import Run, append, fetch, follower, kinds, lai, parse_all, state_of, tick

LAG = 10_000
T = 1_000_000  # event times far from 0: a last-caught-up time of 0 ("never") is then out of the lag, as in Kafka


def both(run: Run, events: list[dict], **config) -> tuple:
    """The outcome under the 2.x rules and under Kafka 3.9's."""
    return tuple(run(events, replica_lag_time_max_ms=LAG, kafka_version=v, **config) for v in ("2.6", "3.9"))


# The configuration key


def test_kafka_version_defaults_to_the_2x_rules_the_public_scenarios_test() -> None:
    assert Config().kafka_version == "2.6"
    assert Config().rules == kafka_rules("2.4") == kafka_rules("3.0")
    assert not any(vars(Config().rules).values())


RULES_3_1 = {"hw_after_isr_update", "isr_write_in_flight"}
RULES_3_3 = RULES_3_1 | {"max_last_fetch_leader_log_end_offset", "reset_replica_state"}
RULES_3_7 = RULES_3_3 | {"under_min_isr_holds_hw", "effective_min_isr"}


@pytest.mark.parametrize(
    ("version", "flags"),
    [
        ("2.6", set()),
        ("3.0.2", set()),
        ("3.1", RULES_3_1),
        ("3.2.3", RULES_3_1),
        ("3.3", RULES_3_3),
        ("3.6.2", RULES_3_3),
        ("3.7.0", RULES_3_7),
        ("3.9.2", RULES_3_7),
        ("3.9.0-rc3", RULES_3_7),
        ("4.0.0", RULES_3_7),  # KRaft only (SPEC §4.8): the leader's rules are 3.9's
        ("4.3.1", RULES_3_7),
    ],
)
def test_each_rule_holds_from_the_release_that_brought_it(version: str, flags: set[str]) -> None:
    rules = Config.from_dict({"kafka_version": version}).rules
    assert isinstance(rules, KafkaRules)
    assert {name for name, on in vars(rules).items() if on} == flags


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("5.0.0", "is not a Kafka version isrwatch models: 2.4 to 4.9"),
        ("2.3.1", "is not a Kafka version isrwatch models"),
        ("3.10", "is not a Kafka version isrwatch models"),
        ("3.9.2\n", "is not a Kafka version isrwatch models"),
        ("latest", "is not a Kafka version isrwatch models"),
        ("", "is not a Kafka version isrwatch models"),
        (3.9, "must be a string"),
        (None, "must be a string"),
        (["3.9"], "must be a string"),
    ],
)
def test_kafka_version_outside_the_modelled_range_is_refused_by_name(value: object, reason: str) -> None:
    with pytest.raises(ConfigError, match=f"^kafka_version: .*{reason}"):
        Config.from_dict({"kafka_version": value})


def test_kafka_version_set_on_the_command_line_is_checked_too() -> None:
    assert Config().with_overrides(['kafka_version="3.9.2"']).rules.under_min_isr_holds_hw
    with pytest.raises(ConfigError, match="kafka_version"):
        Config().with_overrides(['kafka_version="5.1"'])


# 3.1 — every ISR write ends in maybeIncrementLeaderHW, the expand too.
# Partition@2.5.0 L1180-1184: expandIsr writes and returns (only maybeShrinkIsr, L862, runs the HW rule after its
# write); Partition@3.1.0 L1457 and Partition@3.9.0-rc3 L1980: handleAlterPartitionUpdate runs it after either.
# Without the 3.7 min-ISR gate it changes nothing the model can see (an expand only adds a constraint, and a
# follower whose LEO is unchanged rejoins only after a re-election, where the HW rule just ran); with the gate, an
# expand that lifts the partition out of under-min-ISR moves the HW at once.


def test_an_expand_that_lifts_the_min_isr_gate_moves_the_hw_at_once(run: Run) -> None:
    events = [
        lai(T, 1, [1, 2], [1, 2], 0, leader_leo=100, min_insync_replicas=2),
        fetch(T + 100, 2, 100, 100),
        append(T + 200, 150),
        fetch(T + 300, 2, 150, 150),
        # The controller re-elects 1 without 2 (2's broker bounced); the leader's HW is 120 (the agent reports it).
        lai(T + 400, 1, [1], [1, 2], 1, leader_leo=150, hw=120, partition_epoch=1, min_insync_replicas=2),
        fetch(T + 500, 2, 150, 150),  # 2's LEO is unchanged: only the ISR write can move the HW now
    ]
    old, new = both(run, events)
    assert [(d["kind"], d["hw"]) for d in old.decisions[1:]] == [("leader_and_isr", 150), ("expand", 150)]
    # 3.9: ISR [1] < min.insync.replicas 2 holds the HW at the LeaderAndIsr's 120; the expand's write lifts it.
    assert [(d["kind"], d["hw"]) for d in new.decisions[1:]] == [("leader_and_isr", 120), ("expand", 150)]


# 3.7 — the HW stays while the ISR is smaller than the effective min.insync.replicas (KAFKA-15583).
# Partition@3.7.0 L1150-1154 and Partition@3.9.0-rc3 L1166-1170: `if (isUnderMinIsr) return false`; isUnderMinIsr
# and effectiveMinIsr = min(min.insync.replicas, replicas): Partition@3.9.0-rc3 L372-383. Absent in
# Partition@3.6.2 L1103-1122 and Partition@2.5.0 L772-803.


def test_under_min_isr_the_hw_stays_so_the_follower_rejoins_where_it_is(run: Run) -> None:
    events = [
        lai(T, 1, [1, 2], [1, 2], 0, leader_leo=100),
        fetch(T + 100, 2, 100, 100),
        append(T + 200, 200),  # 2 stops fetching at 100
        tick(T + LAG + 500, "isr-expiration"),  # 2 out: ISR [1] < min.insync.replicas 2
        append(T + LAG + 600, 300),
        fetch(T + LAG + 700, 2, 100, 300),  # 2 is back, still at 100
        fetch(T + LAG + 800, 2, 300, 300),
    ]
    old, new = both(run, events, min_insync_replicas=2)
    # 2.x: the shrink lets the HW run to the leader's LEO; 2 at 100 must reach 300 to rejoin.
    assert [(d["ts"] - T, d["kind"], d["hw"]) for d in old.decisions[1:]] == [
        (LAG + 500, "shrink", 200),
        (LAG + 800, "expand", 300),
    ]
    # 3.9: the HW stays at 100 under min ISR, so 2 rejoins at 100, and only then does the HW move.
    assert [(d["ts"] - T, d["kind"], d["hw"]) for d in new.decisions[1:]] == [
        (LAG + 500, "shrink", 100),
        (LAG + 700, "expand", 100),
    ]
    assert state_of(old)["hw"] == state_of(new)["hw"] == 300


def test_min_isr_gate_uses_the_leaders_min_isr_capped_by_the_replicas(run: Run) -> None:
    reported = [lai(T, 1, [1], [1, 2], 0, leader_leo=100, hw=100, min_insync_replicas=2), append(T + 200, 200)]
    assert [state_of(r)["hw"] for r in both(run, reported)] == [200, 100]  # the leader's 2, not the config's 1
    # effectiveMinIsr = min(2, replication factor 1) = 1: a single replica is never under it.
    alone = [lai(T, 1, [1], [1], 0, leader_leo=100, hw=100, min_insync_replicas=2), append(T + 200, 200)]
    assert [state_of(r)["hw"] for r in both(run, alone)] == [200, 200]


# 3.7 — isUnderMinIsr and isAtMinIsr compare the ISR size with effectiveMinIsr = min(min.insync.replicas, replicas)
# (Partition@3.7.0 L360-377, Partition@3.9.0-rc3 L372-389); 2.x to 3.6 with min.insync.replicas as it is
# (Partition@2.5.0 L242-244, Partition@3.6.0 L361-365). The HW gate and the record's flags read the same value.


@pytest.mark.parametrize("where", ["config", "leader"])
def test_min_isr_above_the_replication_factor_flags_as_each_rule_set_compares(run: Run, where: str) -> None:
    """min.insync.replicas 3 on 2 replicas, from the config or as the leader reported it: 2.x flags the full ISR
    under min ISR; 3.7+ caps it at 2, so the full ISR is at min ISR and the HW moves, as its flags say."""
    config = {"min_insync_replicas": 3} if where == "config" else {}
    reported = {"broker": 1, "min_insync_replicas": 3} if where == "leader" else {}
    full = [lai(T, 1, [1, 2], [1, 2], 0, leader_leo=100, hw=100, **reported), append(T + 100, 150)]
    full.append(fetch(T + 200, 2, 150, 150, **({"broker": 1} if reported else {})))
    old, new = both(run, full, **config)
    flags = ("under_min_isr", "at_min_isr", "hw")
    assert [state_of(old)[f] for f in flags] == [True, False, 150]  # 2.x: 2 < 3; no HW gate
    assert [state_of(new)[f] for f in flags] == [False, True, 150]  # 3.7+: 2 == min(3, 2); not under, the HW moves
    shrunk = [lai(T, 1, [1], [1, 2], 0, leader_leo=100, hw=100, **reported), append(T + 100, 150)]
    old, new = both(run, shrunk, **config)
    assert [state_of(old)[f] for f in flags] == [True, False, 150]
    assert [state_of(new)[f] for f in flags] == [True, False, 100]  # 1 < 2: under, so the HW stays


def test_a_leaders_reported_version_decides_its_records_flags(run: Run) -> None:
    """The record's flags follow the rule set of the partition's leader, as its HW rule does, not the config's."""
    events = [
        tick(T, "isr-expiration", broker=1, kafka_version="3.9.2"),
        lai(T + 1, 1, [1, 2], [1, 2], 0, leader_leo=100, hw=100, broker=1, min_insync_replicas=3),
    ]
    state = state_of(run(events, T + 2, replica_lag_time_max_ms=LAG))
    assert (state["under_min_isr"], state["at_min_isr"]) == (False, True)


# 3.3 — Replica.updateFetchStateOrThrow keeps lastFetchLeaderLogEndOffset = max(new, previous):
# Replica@3.3.1 L115 and Replica@3.9.0-rc3 L138; before, the leader's LEO of the last fetch (Replica@2.5.0 L83).
# It matters when a fetch reports a smaller leader LEO than the one before it (events out of Kafka's order).


def test_last_fetch_leader_leo_keeps_the_larger_so_a_follower_does_not_catch_up_on_a_smaller_one(run: Run) -> None:
    events = [
        lai(T, 1, [1, 2], [1, 2], 0, leader_leo=100),
        fetch(T + 100, 2, 50, 100),
        fetch(T + 200, 2, 60, 80),  # a smaller leader LEO than the previous fetch's 100
        fetch(T + 2000, 2, 90, 120),  # 90 >= 80, but < 100
        tick(T + LAG + 150, "isr-expiration"),
    ]
    old, new = both(run, events)
    # 2.x: 90 reached the previous fetch's 80: 2 caught up as of that fetch (T + 200), in sync at T + LAG + 150.
    assert follower(state_of(old), 2)["last_caught_up_ms"] == T + 200
    assert kinds(old) == [(T, "leader_and_isr")]
    # 3.9: the previous fetch's leader LEO stays 100; 2 last caught up at the LeaderAndIsr and is removed as slow.
    assert follower(state_of(new), 2)["last_caught_up_ms"] == T
    assert kinds(new) == [(T, "leader_and_isr"), (T + LAG + 150, "shrink")]
    assert new.decisions[1]["reasons"] == {"2": "slow"}


# 3.3 — Replica.resetReplicaState: a re-elected leader sets lastFetchTimeMs = 0 for a follower outside the ISR
# (Replica@3.3.1 L156, Replica@3.9.0-rc3 L181, called from Partition@3.9.0-rc3 L789-796); before, every follower's
# lastFetchTimeMs became the election time (Replica.resetLastCaughtUpTime, Replica@2.5.0 L102-107, from
# Partition@2.5.0 L512-515). The next fetch that reaches the election's LEO then catches up as of 0, not of it.


def test_reelected_leader_resets_last_fetch_time_of_followers_outside_the_isr(run: Run) -> None:
    events = [
        lai(T, 1, [1, 2, 3], [1, 2, 3], 0, leader_leo=100),
        fetch(T + 100, 2, 100, 100),
        fetch(T + 100, 3, 100, 100),
        lai(T + 200, 1, [1, 2], [1, 2, 3], 1, leader_leo=100, partition_epoch=1),  # 1 re-elected, 3 left out
        append(T + 300, 150),
        fetch(T + 400, 2, 150, 150),
        fetch(T + 500, 3, 120, 150),  # 120 >= the election's LEO 100
        append(T + 600, 200),
        fetch(T + 700, 2, 200, 200),
    ]
    old, new = both(run, events)
    # 2.x: 3 caught up as of the election, so within the lag it holds the HW at 150 (it is behind, outside the ISR).
    assert follower(state_of(old), 3)["last_caught_up_ms"] == T + 200
    assert state_of(old)["hw"] == 150
    # 3.9: caught up as of 0, "never": it holds nothing and the HW follows the ISR to 200.
    assert follower(state_of(new), 3)["last_caught_up_ms"] == 0
    assert state_of(new)["hw"] == 200


# Unchanged: the HW candidates. Partition@2.5.0 L777-782: `leo < hw && (now - lastCaughtUpTimeMs <= lag || in ISR)`;
# Partition@3.3.1 L975-977: ReplicaState.isCaughtUp (Replica@3.9.0-rc3 L67-73: `leaderEndOffset == leo || now -
# lastCaughtUpTimeMs <= lag`), and a candidate behind the HW is never at the leader's LEO; Partition@3.9.0-rc3
# L1178-1185 (3.6, KAFKA-15021): shouldWaitForReplicaToJoinIsr adds isReplicaIsrEligible, in ZooKeeper mode
# ZkMetadataCache.hasAliveBroker (L1083-1084), which no event reports: a fetching follower is taken as alive.


def test_a_caught_up_follower_outside_the_isr_holds_the_hw_in_2x_and_3x_alike(run: Run) -> None:
    events = [
        lai(T, 1, [1, 2], [1, 2, 3], 0, leader_leo=100),
        fetch(T + 50, 2, 100, 100),
        fetch(T + 100, 3, 50, 100),
        append(T + 150, 200),
        fetch(T + 160, 2, 200, 200),
        fetch(T + 200, 3, 100, 200),  # 3 reached the previous fetch's LEO: caught up as of T + 100, behind the HW
        append(T + 300, 300),
        fetch(T + 310, 2, 300, 300),
    ]
    for r in both(run, events):
        assert follower(state_of(r), 3)["last_caught_up_ms"] == T + 100
        assert state_of(r)["hw"] == 200 and state_of(r)["isr"] == [1, 2]


# The agent selects the rule set: a broker's tick carries its Kafka version (SPEC §3.1, §4.8).


def agent_events(with_versions: bool) -> list[dict]:
    """Partition a led by broker 1 (which reports 3.9.2 from its first tick), b by broker 2 (reports nothing) until
    1 takes it over; every partition is under min.insync.replicas 2, so 3.9 holds the HW where 2.x moves it."""
    version = {"kafka_version": "3.9.2"} if with_versions else {}
    return [
        lai(T, 1, [1], [1, 2], 0, leader_leo=100, hw=100, topic="a", broker=1, min_insync_replicas=2),
        lai(T, 2, [2], [1, 2], 0, leader_leo=100, hw=100, topic="b", broker=2, min_insync_replicas=2),
        append(T + 10, 150, topic="a", broker=1),  # before broker 1's first tick: the config's rules
        tick(T + 50, "isr-expiration", broker=1, **version),
        tick(T + 50, "isr-expiration", broker=2),
        append(T + 60, 200, topic="a", broker=1),
        append(T + 60, 200, topic="b", broker=2),
        lai(T + 100, 1, [1], [1, 2], 1, leader_leo=200, topic="b", broker=1, partition_epoch=1, min_insync_replicas=2),
        append(T + 200, 300, topic="b", broker=1),
    ]


@pytest.mark.spark_parity
def test_partitions_follow_their_leaders_reported_version_from_its_first_tick(run: Run) -> None:
    reported = run(agent_events(with_versions=True), replica_lag_time_max_ms=LAG)
    assert state_of(reported, "a")["hw"] == 150  # 2.x rules until the tick, then 3.9's hold the HW
    assert state_of(reported, "b")["hw"] == 200  # 2.x under broker 2, 3.9's once broker 1 leads it
    plain = run(agent_events(with_versions=False), replica_lag_time_max_ms=LAG)
    assert (state_of(plain, "a")["hw"], state_of(plain, "b")["hw"]) == (200, 300)
    lab = run(agent_events(with_versions=False), replica_lag_time_max_ms=LAG, kafka_version="3.9")
    assert (state_of(lab, "a")["hw"], state_of(lab, "b")["hw"]) == (100, 100)  # the config's 3.9 from the start


def test_a_tick_with_a_version_isrwatch_does_not_model_still_runs_and_is_counted() -> None:
    config = Config(replica_lag_time_max_ms=LAG)
    engine = PartitionEngine(config)
    engine.add(
        parse_all(
            [
                tick(T, "isr-expiration", broker=1, kafka_version="5.0.0"),  # not modelled
                tick(T, "isr-expiration", kafka_version="3.9.2"),  # whose version? no broker
                tick(T + 1, "isr-expiration", broker=2, kafka_version="3.9.2"),
            ]
        )
    )
    out = engine.advance(T + 2, Outputs())
    assert by_reason(out.counters, "ignored_ticks") == {
        "unsupported_kafka_version": 1,
        "kafka_version_without_broker": 1,
    }
    assert engine.kafka_versions == {("default", 2): "3.9.2"}


@pytest.mark.spark_parity
def test_an_ignored_tick_reaches_the_summary_once_however_many_keys_run_it(run: Run) -> None:
    """Every state key applies a tick; the key that owns ticks counts the version it did not take, so the
    summary counts each tick once, as the one-pass replay does."""
    events = [
        lai(T, 1, [1, 2], [1, 2], 0, topic="a"),
        lai(T, 2, [1, 2], [1, 2], 0, topic="b"),
        tick(T + 1, "isr-expiration", broker=1, kafka_version="5.0.0"),
        tick(T + 2, "isr-expiration", kafka_version="3.9.2"),
    ]
    outcome = run(events, T + 3, replica_lag_time_max_ms=LAG)
    assert outcome.summary["ignored_ticks_by_reason"] == {
        "kafka_version_without_broker": 1,
        "unsupported_kafka_version": 1,
    }


def test_the_engine_state_keeps_each_brokers_version_compactly() -> None:
    config = Config(replica_lag_time_max_ms=LAG)
    engine = PartitionEngine(config)
    engine.add(parse_all(agent_events(with_versions=True)))
    engine.advance(T + 1000)
    blob = engine.to_bytes()
    again = PartitionEngine(config, blob)
    assert STATE_VERSION == 5
    assert again.kafka_versions == engine.kafka_versions == {("default", 1): "3.9.2"}
    assert again.to_bytes() == blob
    again.kafka_versions = {}
    assert len(blob) - len(again.to_bytes()) <= 24  # per broker, not per partition
