"""One test (or a few) per rule of SPEC §4, named after the rule and the Kafka code it restates."""

from __future__ import annotations

import pytest

from tests.support.state import Run, append, fetch, follower, kinds, lai, state_of, tick

LAG = 10_000


# §4.1 leader_and_isr — ReplicaManager.becomeLeaderOrFollower guards


def test_lai_stale_controller_epoch_is_rejected_and_keeps_the_controller_epoch(run: Run) -> None:
    r = run([lai(1000, 1, [1, 2], [1, 2], 0, controller_epoch=5), lai(2000, 2, [2], [1, 2], 1, controller_epoch=4)])
    assert [d["error"] for d in r.decisions] == [None, "STALE_CONTROLLER_EPOCH"]
    s = state_of(r)
    assert (s["leader"], s["leader_epoch"], s["controller_epoch"]) == (1, 0, 5)


def test_lai_controller_epoch_is_taken_even_when_the_leader_epoch_is_stale(run: Run) -> None:
    r = run(
        [
            lai(1000, 1, [1, 2], [1, 2], 3, controller_epoch=1),
            lai(2000, 2, [2], [1, 2], 3, controller_epoch=7),  # equal leader epoch: rejected, epoch 7 kept
            lai(3000, 2, [2], [1, 2], 4, controller_epoch=6),
        ]
    )  # now stale against 7
    assert [d["error"] for d in r.decisions] == [None, "STALE_CONTROLLER_EPOCH", "STALE_CONTROLLER_EPOCH"]
    assert state_of(r)["controller_epoch"] == 7


def test_lai_lower_leader_epoch_is_rejected(run: Run) -> None:
    r = run([lai(1000, 1, [1, 2], [1, 2], 5), lai(2000, 2, [2], [1, 2], 4)])
    assert r.decisions[1]["kind"] == "rejected"
    assert r.decisions[1]["replicas_changed"] == []
    assert state_of(r)["leader"] == 1


def test_lai_leader_outside_replicas_is_unknown_topic_or_partition(run: Run) -> None:
    r = run([lai(1000, 1, [1, 2], [1, 2], 0), lai(2000, 3, [3], [1, 2], 1)])
    assert r.decisions[1]["error"] == "UNKNOWN_TOPIC_OR_PARTITION"
    assert r.decisions[1]["isr_before"] == r.decisions[1]["isr_after"] == [1, 2]


def test_lai_rejected_before_any_accepted_creates_no_leader(run: Run) -> None:
    r = run([lai(1000, 3, [3], [1, 2], 0), fetch(1100, 2, 0, 0)])
    assert r.decisions[0]["kind"] == "rejected" and r.decisions[0]["leader"] is None
    assert r.summary["ignored_fetches_by_reason"] == {"no_leader_and_isr": 1}


# §4.1 step 4 — Partition.makeLeader


@pytest.mark.spark_parity
def test_make_leader_new_leader_resets_every_follower(run: Run) -> None:
    r = run(
        [
            lai(1000, 1, [1, 2, 3], [1, 2, 3], 0, leader_leo=100),
            fetch(1500, 2, 100, 100, log_start_offset=7),
            lai(2000, 2, [2, 3], [1, 2, 3], 1, leader_leo=90),
        ]
    )
    s = state_of(r)
    assert s["leader_leo"] == 90 and s["leader_epoch_start_offset"] == 90  # may go down on a leader change
    f1, f3 = follower(s, 1), follower(s, 3)
    assert (f1["leo"], f1["log_start_offset"], f1["last_fetch_leader_leo"], f1["last_fetch_ms"]) == (-1, -1, -1, 0)
    assert f1["last_caught_up_ms"] == 0 and not f1["in_sync"]  # not in the new ISR
    assert f3["last_caught_up_ms"] == 2000 and f3["in_sync"]
    assert [f["replica"] for f in s["followers"]] == [1, 3]


def test_make_leader_same_leader_reelected_keeps_follower_leo(run: Run) -> None:
    r = run(
        [
            lai(1000, 1, [1, 2, 3], [1, 2, 3], 0, leader_leo=100),
            fetch(1500, 2, 80, 100, log_start_offset=7),
            lai(2000, 1, [1, 3], [1, 2, 3], 1, leader_leo=120),
        ]
    )
    f2 = follower(state_of(r), 2)
    assert (f2["leo"], f2["log_start_offset"]) == (80, 7)
    assert (f2["last_fetch_leader_leo"], f2["last_fetch_ms"], f2["last_caught_up_ms"]) == (120, 2000, 0)
    assert r.decisions[-1]["replicas_changed"] == [2]


def test_make_leader_leader_leo_defaults_to_last_known_and_sets_epoch_start_offset(run: Run) -> None:
    r = run([lai(1000, 1, [1, 2], [1, 2], 0, leader_leo=50), append(1100, 70), lai(2000, 1, [1, 2], [1, 2], 1)])
    s = state_of(r)
    assert (s["leader_leo"], s["leader_epoch_start_offset"]) == (70, 70)


def test_make_leader_replicas_and_epochs_taken_verbatim_and_removed_replicas_dropped(run: Run) -> None:
    r = run(
        [
            lai(1000, 1, [1, 2, 3], [1, 2, 3], 0, partition_epoch=4),
            lai(2000, 1, [3, 1], [3, 1, 4], 2, partition_epoch=9),
        ]
    )
    s = state_of(r)
    assert s["replicas"] == [3, 1, 4] and s["isr"] == [1, 3] and s["partition_epoch"] == 9
    assert [f["replica"] for f in s["followers"]] == [3, 4]
    assert r.decisions[-1]["replicas_changed"] == [2]


def test_make_leader_event_hw_replaces_then_hw_rule_runs(run: Run) -> None:
    r = run([lai(1000, 1, [1], [1, 2], 0, leader_leo=100, hw=40)])
    # follower 2 (leo -1) is not in the ISR but caught up "now" (lcu 0, 1000 - 0 <= lag): it holds the HW at hw.
    assert state_of(r)["hw"] == 40
    r = run([lai(100_000, 1, [1], [1, 2], 0, leader_leo=100, hw=40)])
    assert state_of(r)["hw"] == 100  # follower 2 out of the ISR and not caught up within the lag


def test_make_leader_every_accepted_request_is_a_decision_even_without_change(run: Run) -> None:
    r = run([lai(1000, 1, [1, 2], [1, 2], 0), lai(2000, 1, [1, 2], [1, 2], 1)])
    assert kinds(r) == [(1000, "leader_and_isr"), (2000, "leader_and_isr")]
    assert r.decisions[1]["replicas_changed"] == [] and r.propagations == []


def test_offline_partition_ignores_fetches_and_appends_and_is_never_shrunk(run: Run) -> None:
    r = run([lai(1000, -1, [2], [1, 2], 0), fetch(1100, 2, 0, 0), append(1200, 10), tick(50_000)])
    s = state_of(r)
    assert s["offline"] and s["isr"] == [2]
    assert r.summary["ignored_fetches_by_reason"] == {"offline": 1}
    assert r.summary["ignored_appends_by_reason"] == {"offline": 1}
    assert [d["kind"] for d in r.decisions] == ["leader_and_isr"]


def test_fetch_and_append_before_first_leader_and_isr_are_ignored(run: Run) -> None:
    r = run([fetch(500, 2, 0, 0), append(600, 5), lai(1000, 1, [1, 2], [1, 2], 0)])
    assert r.summary["ignored_fetches_by_reason"] == {"no_leader_and_isr": 1}
    assert r.summary["ignored_appends_by_reason"] == {"no_leader_and_isr": 1}
    assert state_of(r)["leader_leo"] == 0


# §4.2 fetch — Replica.updateFetchState, Partition.updateFollowerFetchState


def test_fetch_at_leader_leo_sets_last_caught_up_to_fetch_time(run: Run) -> None:
    r = run([lai(1000, 1, [1, 2], [1, 2], 0, leader_leo=10), fetch(1500, 2, 10, 10)])
    assert follower(state_of(r), 2)["last_caught_up_ms"] == 1500


def test_fetch_caught_up_to_previous_fetch_leader_leo_takes_previous_fetch_time(run: Run) -> None:
    r = run([lai(1000, 1, [1, 2], [1, 2], 0, leader_leo=10), fetch(1500, 2, 10, 20), fetch(2000, 2, 20, 30)])
    f2 = follower(state_of(r), 2)
    # makeLeader at 1000: lcu 1000 (in ISR), last fetch (-1, 0) for a new leader
    # 2000: 20 < 30 but >= last_fetch_leader_leo 20 -> lcu = last_fetch_ms 1500
    assert f2["last_caught_up_ms"] == 1500
    assert (f2["leo"], f2["last_fetch_leader_leo"], f2["last_fetch_ms"]) == (20, 30, 2000)


def test_fetch_behind_both_leader_leos_leaves_last_caught_up(run: Run) -> None:
    r = run([lai(1000, 1, [1, 2], [1, 2], 0, leader_leo=10), fetch(1500, 2, 10, 50), fetch(2000, 2, 30, 60)])
    assert follower(state_of(r), 2)["last_caught_up_ms"] == 1000


def test_fetch_last_caught_up_never_goes_back(run: Run) -> None:
    r = run(
        [
            lai(1000, 1, [1, 2], [1, 2], 0, leader_leo=10),
            fetch(5000, 2, 10, 10),
            fetch(6000, 2, 10, 20),
            fetch(7000, 2, 15, 30),
        ]
    )
    assert follower(state_of(r), 2)["last_caught_up_ms"] == 5000


@pytest.mark.spark_parity
def test_fetch_ignored_cases_are_counted_by_reason_and_change_nothing(run: Run) -> None:
    r = run(
        [
            lai(1000, 1, [1, 2], [1, 2], 3, leader_leo=10),
            fetch(1100, 1, 10, 10),  # the leader itself
            fetch(1200, 9, 10, 10),  # not a replica
            fetch(1300, 2, 10, 10, current_leader_epoch=2),  # KAFKA-8400: fenced epoch
            fetch(1400, 2, 11, 10),  # beyond the leader's LEO
            fetch(1500, 2, 5, 10, current_leader_epoch=3),
        ]
    )  # valid
    assert r.summary["ignored_fetches_by_reason"] == {
        "leader_epoch_mismatch": 1,
        "not_follower": 2,
        "offset_out_of_range": 1,
    }
    f2 = follower(state_of(r), 2)
    assert (f2["leo"], f2["last_fetch_ms"]) == (5, 1500)


def test_fetch_raises_leader_leo_only_upwards(run: Run) -> None:
    r = run([lai(1000, 1, [1, 2], [1, 2], 0, leader_leo=100), fetch(1100, 2, 50, 80), fetch(1200, 2, 50, 130)])
    assert state_of(r)["leader_leo"] == 130


# §4.2 expand — Partition.maybeExpandIsr / isFollowerInSync


def test_expand_when_follower_reaches_hw_without_lag_condition(run: Run) -> None:
    r = run(
        [lai(1000, 1, [1], [1, 2], 0, leader_leo=100), append(1100, 200), fetch(60_000, 2, 100, 200)],
        isr_expiration_interval_ms=0,
    )
    d = r.decisions[-1]
    assert (d["kind"], d["ts"], d["isr_before"], d["isr_after"], d["replicas_changed"]) == (
        "expand",
        60_000,
        [1],
        [1, 2],
        [2],
    )
    assert d["leader"] == 1 and d["hw"] == 100
    assert state_of(r)["partition_epoch"] == 1


def test_expand_requires_leader_epoch_start_offset(run: Run) -> None:
    # HW 0 but the new leader's epoch started at 100: a follower at 50 is not in sync yet.
    r = run([lai(1000, 1, [1], [1, 2], 0, leader_leo=100), fetch(1100, 2, 50, 100), fetch(1200, 2, 100, 100)])
    assert kinds(r) == [(1000, "leader_and_isr"), (1200, "expand")]


def test_expand_waits_until_the_follower_reaches_the_hw(run: Run) -> None:
    # Follower 2 is outside the ISR and long not caught up, so it does not hold the HW back (HW 100).
    r = run(
        [
            lai(100_000, 1, [1, 3], [1, 2, 3], 0, leader_leo=0),
            append(100_050, 100),
            fetch(100_100, 3, 100, 100),
            fetch(100_200, 2, 50, 100),
            fetch(100_300, 2, 100, 100),
        ]
    )
    assert kinds(r) == [(100_000, "leader_and_isr"), (100_300, "expand")]
    assert r.decisions[-1]["hw"] == 100


def test_hw_rule_runs_after_fetch_only_when_follower_leo_changed(run: Run) -> None:
    # Follower 2: outside the ISR, never caught up, below the epoch start offset: it never holds the HW.
    base = [lai(100_000, 1, [1], [1, 2], 0, leader_leo=100), fetch(100_100, 2, 50, 100)]
    r = run([*base, fetch(100_200, 2, 50, 150)])  # LEO unchanged: no HW rule although leader LEO is 150
    s = state_of(r)
    assert (s["leader_leo"], s["hw"]) == (150, 100)
    r = run([*base, fetch(100_200, 2, 60, 150)])
    assert state_of(r)["hw"] == 150


# §4.3 append


def test_append_raises_leader_leo_and_runs_hw_rule(run: Run) -> None:
    r = run([lai(1000, 1, [1], [1, 2], 0, leader_leo=0), append(100_000, 30), append(100_100, 20)])
    s = state_of(r)
    assert (s["leader_leo"], s["hw"]) == (30, 30)  # follower 2 out of ISR and not caught up within the lag


# §4.4 isr-expiration — Partition.maybeShrinkIsr / getOutOfSyncReplicas


def test_shrink_is_strictly_after_the_lag(run: Run) -> None:
    events = [lai(1000, 1, [1, 2], [1, 2], 0, leader_leo=10), fetch(1000, 2, 10, 10), append(1100, 20)]
    r = run([*events, tick(11_000, "isr-expiration")], replica_lag_time_max_ms=LAG, isr_expiration_interval_ms=0)
    assert [d["kind"] for d in r.decisions] == ["leader_and_isr"]
    r = run([*events, tick(11_001, "isr-expiration")], replica_lag_time_max_ms=LAG, isr_expiration_interval_ms=0)
    d = r.decisions[-1]
    assert (d["kind"], d["ts"], d["isr_after"], d["replicas_changed"], d["reasons"]) == (
        "shrink",
        11_001,
        [1],
        [2],
        {"2": "stuck"},
    )
    assert d["hw"] == 20  # HW rule after the shrink: follower 2 no longer holds it back


def test_follower_at_leader_leo_never_expires_kafka_7152(run: Run) -> None:
    r = run(
        [lai(1000, 1, [1, 2], [1, 2], 0, leader_leo=10), fetch(1000, 2, 10, 10), tick(500_000)],
        replica_lag_time_max_ms=LAG,
    )
    assert [d["kind"] for d in r.decisions] == ["leader_and_isr"]
    assert follower(state_of(r), 2)["shrink_eligible_at_ms"] is None


@pytest.mark.spark_parity
def test_shrink_reason_slow_when_fetching_but_not_caught_up(run: Run) -> None:
    events = [lai(0, 1, [1, 2], [1, 2], 0, leader_leo=100)]
    leo = 100
    for t in range(1000, 16_000, 1000):
        leo += 100
        events += [append(t, leo), fetch(t + 500, 2, leo - 150, leo)]
    r = run(events, replica_lag_time_max_ms=LAG)
    shrink = next(d for d in r.decisions if d["kind"] == "shrink")
    assert shrink["reasons"] == {"2": "slow"} and shrink["ts"] == 15_000  # eligible at 10_001, checks every 5 s


def test_shrink_never_removes_the_leader_and_respects_the_scheduled_window(run: Run) -> None:
    r = run(
        [lai(0, 1, [1, 2, 3], [1, 2, 3], 0, leader_leo=5), fetch(1600, 2, 5, 5), fetch(1600, 3, 0, 5)],
        until=30_000,
        replica_lag_time_max_ms=LAG,
    )
    shrink = next(d for d in r.decisions if d["kind"] == "shrink")
    # lcu of 3 = 0 (makeLeader at 0): eligible 10_001, first check at or after it is 15_000 (= 1.5 x lag)
    assert (shrink["ts"], shrink["isr_after"], shrink["reasons"]) == (15_000, [1, 2], {"3": "stuck"})


@pytest.mark.spark_parity
def test_explicit_tick_acts_only_on_its_cluster(run: Run) -> None:
    events = [
        lai(0, 1, [1, 2], [1, 2], 0, leader_leo=5, cluster="a"),
        lai(0, 1, [1, 2], [1, 2], 0, leader_leo=5, cluster="b"),
        tick(20_000, "isr-expiration", cluster="a"),
    ]
    r = run(events, replica_lag_time_max_ms=LAG, isr_expiration_interval_ms=0)
    shrinks = [d for d in r.decisions if d["kind"] == "shrink"]
    assert [d["cluster"] for d in shrinks] == ["a"]


def test_predicted_shrink_time_is_the_first_scheduled_check_after_eligibility(run: Run) -> None:
    r = run(
        [lai(1000, 1, [1, 2], [1, 2], 0, leader_leo=5), fetch(2000, 2, 3, 5)],
        replica_lag_time_max_ms=LAG,
        schedule_origin_ms=500,
    )
    f2 = follower(state_of(r), 2)
    assert f2["shrink_eligible_at_ms"] == 1000 + LAG + 1
    assert f2["predicted_shrink_at_ms"] == 15_500  # 500 + 3 x 5000
    assert f2["lag_offsets"] == 2
    r = run([lai(1000, 1, [1, 2], [1, 2], 0, leader_leo=5)], replica_lag_time_max_ms=LAG, isr_expiration_interval_ms=0)
    assert follower(state_of(r), 2)["predicted_shrink_at_ms"] is None


# §4.5 high watermark — Partition.maybeIncrementLeaderHW


def test_hw_counts_followers_outside_the_isr_only_within_the_lag(run: Run) -> None:
    # Follower 2 stays outside the ISR (below the epoch start offset 100) at LEO 50.
    r = run([lai(1000, 1, [1], [1, 2], 0, leader_leo=100), fetch(1100, 2, 50, 100)], replica_lag_time_max_ms=LAG)
    assert state_of(r)["hw"] == 50  # 1100 - lcu 0 <= lag: it still counts
    r = run([lai(100_000, 1, [1], [1, 2], 0, leader_leo=100), fetch(100_100, 2, 50, 100)], replica_lag_time_max_ms=LAG)
    assert state_of(r)["hw"] == 100


def test_hw_never_decreases_on_append_or_fetch(run: Run) -> None:
    r = run(
        [
            lai(1000, 1, [1, 2], [1, 2], 0, leader_leo=0),
            fetch(1100, 2, 0, 0),
            append(1200, 100),
            fetch(1300, 2, 100, 100),
            lai(2000, 1, [1, 2, 3], [1, 2, 3], 1),
        ]
    )
    s = state_of(r)
    assert s["hw"] == 100  # new replica 3 (leo -1, in ISR) cannot pull it back


# §4.6 propagation — ReplicaManager.maybePropagateIsrChanges


def _expand_at(ts: int, partition: int = 0, leader: int = 1) -> list[dict]:
    return [
        lai(ts - 100, leader, [leader], [leader, 9], 0, leader_leo=0, partition=partition),
        fetch(ts, 9, 0, 0, partition=partition),
    ]


def test_propagation_after_linger_is_strict(run: Run) -> None:
    r = run(_expand_at(7500), until=20_000)  # quiet-time holds at the first check > 12_500: 15_000
    assert [(p["ts"], p["trigger"]) for p in r.propagations] == [(15_000, "linger")]
    r = run(_expand_at(7400), until=20_000)  # 12_400 + ... first check > 12_400 is 12_500
    assert [(p["ts"], p["trigger"], p["first_change_ts"], p["last_change_ts"]) for p in r.propagations] == [
        (12_500, "linger", 7400, 7400)
    ]


def test_propagation_lists_each_partition_once_per_broker(run: Run) -> None:
    events = [
        *_expand_at(1000, 0),
        lai(1500, 1, [1], [1, 9], 1, partition=0, leader_leo=0),
        fetch(1600, 9, 0, 0),
        *_expand_at(2000, 1),
        *_expand_at(2000, 2, leader=2),
    ]
    r = run(events, until=20_000)
    by_broker = {p["broker"]: p for p in r.propagations}
    assert by_broker[1]["partitions"] == [{"topic": "t", "partition": 0}, {"topic": "t", "partition": 1}]
    assert (by_broker[1]["first_change_ts"], by_broker[1]["last_change_ts"]) == (1000, 2000)
    assert by_broker[2]["partitions"] == [{"topic": "t", "partition": 2}]


def test_isr_expiration_runs_before_propagation_at_the_same_instant(run: Run) -> None:
    # origin 0, max delay 60 s: a shrink at the 75 s check is sent by the propagation check at 75 s.
    r = run(
        [lai(0, 1, [1, 2], [1, 2], 0, leader_leo=5)],
        until=80_000,
        replica_lag_time_max_ms=70_000,
        isr_expiration_interval_ms=5000,
    )
    assert kinds(r)[-1] == (75_000, "shrink")
    assert [(p["ts"], p["trigger"]) for p in r.propagations] == [(75_000, "max_delay")]


def test_explicit_propagation_tick_runs_where_it_stands_in_seq_order(run: Run) -> None:
    base = [lai(900, 1, [1], [1, 9], 0, leader_leo=0)]
    before = run(
        [*base, tick(10_000, "isr-change-propagation"), fetch(10_000, 9, 0, 0)],
        until=10_000,
        isr_change_check_interval_ms=0,
        isr_change_max_delay_ms=1000,
    )
    assert before.propagations == []  # the tick ran before the expand at the same ts
    after = run(
        [*base, fetch(10_000, 9, 0, 0), tick(10_000, "isr-change-propagation")],
        until=10_000,
        isr_change_check_interval_ms=0,
        isr_change_max_delay_ms=1000,
    )
    assert [(p["ts"], p["trigger"]) for p in after.propagations] == [(10_000, "max_delay")]


def test_tick_without_task_runs_both_expiration_then_propagation(run: Run) -> None:
    r = run(
        [lai(0, 1, [1, 2], [1, 2], 0, leader_leo=5), tick(100_000)],
        replica_lag_time_max_ms=LAG,
        isr_expiration_interval_ms=0,
        isr_change_check_interval_ms=0,
    )
    assert kinds(r)[-1] == (100_000, "shrink")
    assert [(p["ts"], p["trigger"]) for p in r.propagations] == [(100_000, "max_delay")]


@pytest.mark.spark_parity
def test_changes_keep_coming_forced_out_by_max_delay(run: Run) -> None:
    events = []
    for i in range(30):  # an expand every 4 s on fresh partitions: never 5 s of quiet
        events += _expand_at(61_000 + 4000 * i, partition=i)
    r = run(events, until=200_000)
    first = r.propagations[0]
    assert (first["ts"], first["trigger"]) == (62_500, "max_delay")
    second = r.propagations[1]
    assert second["trigger"] == "max_delay" and 62_500 + 60_000 < second["ts"] <= 62_500 + 62_500


# §3 ordering


def test_ties_on_ts_are_broken_by_seq_and_input_order_does_not_matter(run: Run) -> None:
    events = [
        lai(1000, 1, [1], [1, 2], 0, leader_leo=0, seq=1),
        fetch(2000, 2, 0, 0, seq=3),
        lai(2000, 1, [1], [1, 2], 1, leader_leo=0, seq=2),
    ]
    r = run(list(reversed(events)))
    # seq 2 (re-election, ISR [1]) before seq 3 (the fetch that expands)
    assert [d["kind"] for d in r.decisions] == ["leader_and_isr", "leader_and_isr", "expand"]


def test_a_check_at_t_runs_after_events_at_t_and_before_events_after_t(run: Run) -> None:
    base = [lai(0, 1, [1, 2], [1, 2], 0, leader_leo=5)]  # follower 2 eligible at 10_001, check at 15_000
    at_t = run([*base, fetch(15_000, 2, 5, 5)], replica_lag_time_max_ms=LAG)
    assert [d["kind"] for d in at_t.decisions] == ["leader_and_isr"]
    after_t = run([*base, fetch(15_001, 2, 5, 5)], replica_lag_time_max_ms=LAG)
    assert kinds(after_t) == [(0, "leader_and_isr"), (15_000, "shrink"), (15_001, "expand")]


def test_partition_record_health_flags_use_per_topic_min_isr(run: Run) -> None:
    events = [
        lai(0, 1, [1, 2], [1, 2, 3], 0, topic="orders"),
        lai(0, 1, [1, 2], [1, 2, 3], 0, topic="logs"),
        lai(0, -1, [], [1, 2], 0, topic="dead"),
    ]
    r = run(events, min_insync_replicas=2, min_insync_replicas_by_topic={"orders": 3})
    orders, logs, dead = state_of(r, "orders"), state_of(r, "logs"), state_of(r, "dead")
    assert (orders["under_replicated"], orders["under_min_isr"], orders["at_min_isr"]) == (True, True, False)
    assert (logs["under_min_isr"], logs["at_min_isr"]) == (False, True)
    assert dead["offline"] and dead["under_min_isr"] and not orders["offline"]
    assert [f["replica"] for f in dead["followers"]] == [1, 2]
