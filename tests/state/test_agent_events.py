"""Input from isrwatch-agent (SPEC §3.1): every event names the broker that reported it, and the model follows.

Brokers 1 and 2 lead t-0 and t-1 (replicas 1, 2, 3). Run with the agent profile: checks and propagation run only
at the brokers' own ticks.
"""

from __future__ import annotations

import json

from isrwatch.state.events import DeadLetter, parse_event
from tests.support.state import Run, append, fetch, lai, state_of, tick

AGENT = {"replica_lag_time_max_ms": 10_000, "isr_expiration_interval_ms": 0, "isr_change_check_interval_ms": 0}


def two_leaders() -> list[dict]:
    """t-0 led by 1 and t-1 led by 2, both with follower 3 stuck from 1500 on."""
    events = []
    for partition, leader in ((0, 1), (1, 2)):
        other = 2 if leader == 1 else 1
        events += [
            lai(1000, leader, [1, 2, 3], [1, 2, 3], 0, partition=partition, leader_leo=100, hw=100, broker=leader),
            fetch(1500, 3, 100, 100, partition=partition, broker=leader),
            append(2000, 200, partition=partition, broker=leader),
            fetch(2500, other, 200, 200, partition=partition, broker=leader),
        ]
    return events


def test_a_brokers_tick_checks_only_the_partitions_it_leads(run: Run) -> None:
    events = [
        *two_leaders(),
        tick(15_000, "isr-expiration", broker=1),
        fetch(15_500, 1, 200, 200, partition=1, broker=2),
    ]
    outcome = run(events, 16_000, **AGENT)
    shrinks = [(d["partition"], d["leader"]) for d in outcome.decisions if d["kind"] == "shrink"]
    assert shrinks == [(0, 1)]  # t-1's follower 3 is as late, but its leader has not run its check
    assert state_of(outcome, partition=1)["isr"] == [1, 2, 3]


def test_events_a_non_leader_reports_are_ignored(run: Run) -> None:
    """An old leader's last events (or a skewed clock) must not move the new leader's followers."""
    events = [
        *two_leaders(),
        fetch(3000, 3, 200, 200, broker=2),  # t-0 is led by 1: broker 2 cannot have served this fetch
        append(3500, 900, broker=3),
        tick(15_000, "isr-expiration", broker=1),
    ]
    outcome = run(events, 16_000, **AGENT)
    assert outcome.summary["ignored_fetches_by_reason"] == {"not_leader": 1}
    assert outcome.summary["ignored_appends_by_reason"] == {"not_leader": 1}
    assert state_of(outcome)["leader_leo"] == 200
    assert [d["partition"] for d in outcome.decisions if d["kind"] == "shrink"] == [0]


def test_one_leader_and_isr_request_is_one_decision_however_many_replicas_report_it(run: Run) -> None:
    """The controller sends each partition state to every replica; the agent on each reports it. The leader's copy
    counts; a follower's is another copy; an offline state (no leader to report it) counts once, from the first
    replica, and its repeats are duplicates."""
    base = lai(1000, 1, [1, 2, 3], [1, 2, 3], 0, leader_leo=100, hw=100)
    offline = lai(5000, -1, [2], [1, 2, 3], 1, partition_epoch=3)
    events = [
        {**base, "broker": 2},
        {**base, "broker": 1},
        {**base, "broker": 3},
        {**offline, "broker": 2},
        {**offline, "broker": 3, "ts": 5001},
    ]
    outcome = run(events, 6000, **AGENT)
    assert [(d["ts"], d["kind"], d["leader"]) for d in outcome.decisions] == [
        (1000, "leader_and_isr", 1),
        (5000, "leader_and_isr", -1),
    ]
    assert outcome.summary["ignored_leader_and_isr_by_reason"] == {"duplicate": 1, "follower_copy": 2}


def test_the_leaders_min_insync_replicas_decides_the_flags(run: Run) -> None:
    """The agent reports the topic's min.insync.replicas as the leader has it; the model takes it over the config
    (3.7+: capped at the replica count, Kafka's effective value; 2.x: as it is, SPEC §4.8)."""
    events = [lai(1000, 1, [1, 2], [1, 2, 3], 0, leader_leo=100, hw=100, broker=1, min_insync_replicas=2)]
    outcome = run(events, 2000, **AGENT)
    assert (state_of(outcome)["at_min_isr"], state_of(outcome)["under_min_isr"]) == (True, False)
    events = [lai(1000, 1, [1, 2, 3], [1, 2, 3], 0, leader_leo=100, hw=100, broker=1, min_insync_replicas=5)]
    assert state_of(run(events, 2000, **AGENT, kafka_version="3.9"))["at_min_isr"] is True
    assert state_of(run(events, 2000, **AGENT))["under_min_isr"] is True  # 2.x: 3 < 5


def propagation_tick(ts: int, broker: int, changed: int, propagated: int) -> dict:
    return tick(ts, "isr-change-propagation", broker=broker, last_isr_change_ms=changed, last_propagation_ms=propagated)


def test_a_broker_first_seen_starts_from_the_throttle_its_run_reports(run: Run) -> None:
    """Kafka starts lastIsrChangeMs and lastIsrPropagationMs at the broker's start, which only its ticks report:
    a shrink at 15 s of a broker that started at 14 s is sent 5 s after the later of the two."""
    events = [
        *two_leaders(),
        propagation_tick(2500, 1, 1000, 1000),
        tick(15_000, "isr-expiration", broker=1),
        *(propagation_tick(ts, 1, 15_000, 1000) for ts in range(17_500, 25_000, 2500)),
    ]
    outcome = run(events, 25_000, **AGENT)
    assert [(p["ts"], p["broker"], p["trigger"]) for p in outcome.propagations] == [(22_500, 1, "linger")]


def test_a_restarted_broker_forgets_the_changes_it_had_not_sent(run: Run) -> None:
    """ReplicaManager keeps its ISR-change set in memory: a broker killed before its batch never sends it. Its
    ticks after the restart report both times at its start (30 s): the model drops what the old run had pending."""
    events = [
        *two_leaders(),
        propagation_tick(2500, 1, 1000, 1000),
        tick(15_000, "isr-expiration", broker=1),  # the shrink of t-0: pending on broker 1
        propagation_tick(17_500, 1, 15_000, 1000),  # quiet for less than the linger: not sent yet
        propagation_tick(32_500, 1, 30_000, 30_000),  # the new broker: started at 30 s, nothing pending
        propagation_tick(37_500, 1, 30_000, 30_000),
    ]
    outcome = run(events, 40_000, **AGENT)
    assert outcome.propagations == []
    assert outcome.summary["partitions_pending_propagation"] == 0


def test_the_linger_runs_from_the_brokers_stamp_of_the_write(run: Run) -> None:
    """Kafka stamps lastIsrChangeMs when the ZooKeeper write commits (ZkAlterPartitionManager.scala 3.9 L78), here
    10 ms after the check that decided the shrink at 15 s: at 20005 the broker has not been quiet for the linger
    (15010 + 5000), so the batch goes at the next run, with the broker's stamp."""
    events = [
        *two_leaders(),
        propagation_tick(2500, 1, 1000, 1000),
        tick(15_000, "isr-expiration", broker=1),
        propagation_tick(17_500, 1, 15_010, 1000),
        propagation_tick(20_005, 1, 15_010, 1000),
        propagation_tick(22_505, 1, 15_010, 22_505),
    ]
    outcome = run(events, 25_000, **AGENT)
    assert [(p["ts"], p["trigger"], p["last_change_ts"]) for p in outcome.propagations] == [(22_505, "linger", 15_010)]


def test_a_write_still_in_flight_at_a_run_waits_for_the_next_batch(run: Run) -> None:
    """Kafka puts a partition in isrChangeSet when its write commits (ZkAlterPartitionManager.scala 3.9 L74-79).
    Broker 1 shrank t-0 at 15 s (committed at 15003) and expands t-2 at 19990; at the run at 20005 that write is
    in flight (the run reports 15003): t-0 goes alone, quiet since its commit, and t-2 with the next batch."""
    events = [
        *two_leaders(),
        lai(1000, 1, [1, 2], [1, 2, 3], 0, partition=2, leader_leo=100, hw=100, broker=1),
        fetch(14_000, 2, 100, 100, partition=2, broker=1),
        propagation_tick(2500, 1, 1000, 1000),
        tick(15_000, "isr-expiration", broker=1),
        propagation_tick(17_500, 1, 15_003, 1000),
        fetch(19_990, 3, 100, 100, partition=2, broker=1),  # replica 3 catches up: the expand
        propagation_tick(20_005, 1, 15_003, 20_005),
        propagation_tick(22_505, 1, 19_994, 20_005),
        propagation_tick(25_005, 1, 19_994, 25_005),
    ]
    outcome = run(events, 26_000, **AGENT)
    assert [d["partition"] for d in outcome.decisions if d["kind"] in ("shrink", "expand")] == [0, 2]
    batches = [(p["ts"], [q["partition"] for q in p["partitions"]], p["last_change_ts"]) for p in outcome.propagations]
    assert batches == [(20_005, [0], 15_003), (25_005, [2], 19_994)]


def test_a_check_inside_a_slow_run_commits_before_the_run_ends(run: Run) -> None:
    """The isr-expiration run 15000-15300 checked t-0 at some clock inside it and its write committed at 15150,
    before the run ended: the broker's stamp covers the change (decided at the run's start at the latest), so the
    change is not taken for a write in flight and goes with the broker's batch."""
    events = [
        *two_leaders(),
        propagation_tick(2500, 1, 1000, 1000),
        tick(15_000, "isr-expiration", broker=1, end_ms=15_300),
        *(propagation_tick(ts, 1, 15_150, 1000) for ts in (17_500, 20_005)),
        propagation_tick(22_505, 1, 15_150, 22_505),
    ]
    outcome = run(events, 23_000, **AGENT)
    assert [(p["ts"], p["last_change_ts"]) for p in outcome.propagations] == [(22_505, 15_150)]


def test_the_max_delay_runs_from_the_brokers_last_batch(run: Run) -> None:
    """Each run reports when the broker last sent a batch (here at 10 s, of a change the model did not see): 60 s
    after it, not after the model's last batch, a change is forced out at once; before, it waits for the linger."""
    events = [
        *two_leaders(),
        propagation_tick(2500, 1, 1000, 1000),
        propagation_tick(10_000, 1, 4000, 10_000),
        tick(65_000, "isr-expiration", broker=1),
        *(propagation_tick(ts, 1, 65_002, 10_000) for ts in (65_500, 68_000)),
        propagation_tick(70_500, 1, 65_002, 70_500),
    ]
    outcome = run(events, 71_000, **AGENT)
    assert [(p["ts"], p["trigger"]) for p in outcome.propagations] == [(70_500, "linger")]


def test_what_brokers_did_must_name_the_broker() -> None:
    for raw in (
        {"type": "isr_change_propagated", "ts": 5, "partitions": []},
        {"type": "isr_updated", "ts": 5, "topic": "t", "partition": 0, "leader": 1, "isr": [1], "partition_epoch": 1,
         "kind": "shrink"},
    ):  # fmt: skip
        dead = parse_event(json.dumps(raw), 1)
        assert isinstance(dead, DeadLetter) and dead.field == "broker"


def test_fetches_captured_during_an_isr_expiration_run_count_for_its_checks(run: Run) -> None:
    """Found on the lab (tests/reality): broker 3 leads t-0 and resumes after an 8 s pause (its followers two records
    behind). Its first isr-expiration run starts at 9458 and takes 22 ms; Kafka checks each partition at its own
    clock during the run
    (ReplicaManager.scala 3.9 L2415-2421 runs Partition.maybeShrinkIsr partition by partition; getOutOfSyncReplicas
    reads `time.milliseconds()` per partition, Partition.scala 3.9 L1309-1315), while the fetch threads keep updating
    the followers (both fetches below were captured before the run's tick). The broker shrank nothing. Ordered at
    the run's start, the model would have seen both followers 8.3 s behind; the agent reports the run's end
    (`end_ms`) and the tick sorts there, after what was captured during it."""
    events = [
        lai(1000, 3, [1, 2, 3], [3, 1, 2], 0, leader_leo=239, hw=239, broker=3),
        fetch(1100, 1, 239, 239, broker=3),
        fetch(1125, 2, 239, 239, broker=3),
        append(1200, 241, broker=3),  # two records the followers had not fetched when the broker paused
        fetch(9459, 2, 241, 241, broker=3),
        fetch(9479, 1, 241, 241, broker=3),
        tick(9458, "isr-expiration", broker=3, end_ms=9480),
    ]
    assert [d["kind"] for d in run(events, 9600, **{**AGENT, "replica_lag_time_max_ms": 5000}).decisions] == [
        "leader_and_isr"
    ]
    # The same tick without its end (a run reported at its start only) sorts before those fetches: both shrunk.
    at_start = [*events[:-1], tick(9458, "isr-expiration", broker=3)]
    shrinks = [
        d for d in run(at_start, 9600, **{**AGENT, "replica_lag_time_max_ms": 5000}).decisions if d["kind"] == "shrink"
    ]
    assert [d["isr_after"] for d in shrinks] == [[3]]


def test_only_an_isr_expiration_run_reports_an_end_and_not_before_its_start() -> None:
    for raw, reason in (
        ({"type": "tick", "ts": 10, "task": "isr-change-propagation", "end_ms": 12}, "only an isr-expiration tick"),
        ({"type": "tick", "ts": 10, "end_ms": 12}, "only an isr-expiration tick"),
        ({"type": "tick", "ts": 10, "task": "isr-expiration", "end_ms": 9}, "cannot end (9) before it starts"),
    ):
        dead = parse_event(json.dumps(raw), seq=1)
        assert isinstance(dead, DeadLetter) and dead.field == "end_ms" and reason in dead.reason, dead
    assert (
        parse_event(json.dumps({"type": "tick", "ts": 10, "task": "isr-expiration", "end_ms": 10}), seq=1).end_ms == 10
    )


def test_a_fetch_past_the_leo_the_model_knows_runs_the_hw_rule_of_the_appends_first(run: Run) -> None:
    """Found on the lab (tests/reality): broker 2 became leader of t-0 (HW 0) and was paused before any record; on
    resuming it shrank the ISR to itself and took records. Kafka's appendRecordsToLeader moved the HW at once to
    the records it took alone (Partition.scala 3.9 L1365-1383), so follower 1 fetching at offset 0 did not rejoin
    (isFollowerInSync: its LEO >= HW, L1053-1058); both rejoined once they reached that HW. The agent reports appends
    only at isr-expiration runs: the fetch's leader LEO stands for the appends, and their HW rule runs first."""
    events = [
        lai(1000, 2, [1, 2, 3], [2, 3, 1], 0, leader_leo=0, hw=0, broker=2),
        tick(11_000, "isr-expiration", broker=2, end_ms=11_690),
        fetch(12_484, 1, 0, 1, broker=2),
        fetch(12_526, 3, 0, 1, broker=2),
        fetch(12_819, 3, 1, 55, broker=2),
        fetch(12_921, 1, 1, 55, broker=2),
        fetch(13_094, 3, 55, 55, broker=2),
        fetch(13_315, 1, 55, 103, broker=2),
    ]
    outcome = run(events, 14_000, **{**AGENT, "replica_lag_time_max_ms": 5000})
    assert [(d["kind"], d["isr_after"]) for d in outcome.decisions if d["kind"] != "leader_and_isr"] == [
        ("shrink", [2]),
        ("expand", [2, 3]),
        ("expand", [1, 2, 3]),
    ]
    assert state_of(outcome)["hw"] == 55  # follower 3 in the ISR at 55 holds it below the leader's 103


def test_a_check_the_run_reported_happens_at_its_clock_before_later_fetches(run: Run) -> None:
    """Found on the lab (tests/reality): broker 1 resumes from a pause; its run checks t-0 at 11001 (the append it
    reports carries the clock the check read: `check_ms`) and shrinks follower 3 (last caught up at 1500), whose
    fetches at 11008 and 11054 come after the check, though before the run's end (11110); the first takes it back
    (at the HW). Partition.scala 3.9 L1309-1315: the check's own clock. The model checks the partition at the
    append, and the run's tick does not check it again."""
    events = [
        lai(1000, 1, [1, 2, 3], [1, 2, 3], 0, leader_leo=100, hw=100, broker=1),
        fetch(1500, 3, 100, 100, broker=1),
        fetch(5000, 2, 380, 380, broker=1),
        fetch(11_000, 2, 380, 380, broker=1),
        append(11_000, 385, broker=1, check_ms=11_001),
        fetch(11_008, 3, 380, 384, broker=1),
        fetch(11_054, 3, 385, 388, broker=1),
        tick(11_000, "isr-expiration", broker=1, end_ms=11_110),
    ]
    lag = {**AGENT, "replica_lag_time_max_ms": 5000}
    decided = [(d["ts"], d["kind"], d["isr_after"]) for d in run(events, 12_000, **lag).decisions]
    assert decided[1:] == [(11_001, "shrink", [1, 2]), (11_008, "expand", [1, 2, 3])]
    # Without the check's clock the run's checks are at its end, after both fetches: nothing to shrink.
    no_clock = [{k: v for k, v in ev.items() if k != "check_ms"} for ev in events]
    assert [d["kind"] for d in run(no_clock, 12_000, **lag).decisions] == ["leader_and_isr"]
