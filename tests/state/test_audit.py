"""The live audit (SPEC §7): the model's ISR writes and batches against what a broker observably did.

Broker 1 leads t-0 (replicas 1, 2, 3) and reports like isrwatch-agent: its LeaderAndIsr, the follower
fetches, its own isr-expiration runs every 5 s and propagation runs, and its real writes. Follower 3 stops
fetching at 1500, so with replica.lag.time.max.ms = 10 s it is out of sync after 11500.
"""

from __future__ import annotations

from typing import Any

import pytest

from isrwatch.state.records import DecisionKind, IsrWrite
from tests.support.audit import END, RUNS_AT_0, isr_updated, propagated, story
from tests.support.state import Outcome, Run, append, fetch, lai, tick

AGENT = {
    "replica_lag_time_max_ms": 10_000,
    "isr_expiration_interval_ms": 0,  # --profile agent: the broker's own ticks only
    "isr_change_check_interval_ms": 0,
}


def model_write(
    ts: int,
    epoch: int,
    broker: int,
    kind: DecisionKind,
    isr_before: list[int],
    isr: list[int],
    partition: int = 0,
    **rest: Any,
) -> IsrWrite:
    """The model's ISR write of t-0 (or another partition of t) in cluster c, for the tests that feed the audit
    directly."""
    return IsrWrite(
        ts=ts,
        cluster="c",
        broker=broker,
        topic="t",
        partition=partition,
        partition_epoch=epoch,
        kind=kind,
        isr_before=isr_before,
        isr=isr,
        **rest,
    )


def kinds(outcome: Outcome) -> list[tuple[str, str]]:
    return [(d["subject"], d["kind"]) for d in outcome.divergences]


@pytest.mark.spark_parity
def test_a_broker_that_did_what_the_model_decided_diverges_nowhere(run: Run) -> None:
    events = story(RUNS_AT_0, isr_updated(15_020, [1, 2], 1, check_ms=15_002), propagated(22_500))
    outcome = run(events, END, **AGENT)
    assert [(d["ts"], d["kind"], d["isr_after"]) for d in outcome.decisions if d["kind"] == "shrink"] == [
        (15_000, "shrink", [1, 2])
    ]
    assert [p["ts"] for p in outcome.propagations] == [22_500]
    assert [o["type"] for o in outcome.observed] == ["isr_updated", "isr_change_propagated"]
    assert outcome.divergences == []
    assert outcome.summary["divergences_by_kind"] == {} and outcome.summary["audit_pending"] == 0
    assert outcome.states[0]["isr"] == [1, 2]  # observed events never change the model


def test_a_shrink_and_batch_the_broker_never_made_are_unexplained(run: Run) -> None:
    outcome = run(story(RUNS_AT_0), END, **AGENT)
    assert kinds(outcome) == [("isr", "unexplained_by_model"), ("propagation", "unexplained_by_model")]
    isr = outcome.divergences[0]
    assert (isr["ts"], isr["broker"], isr["partition_epoch"], isr["observed"]) == (15_000, 1, 1, None)
    assert isr["model"]["reasons"] == {"3": "stuck"} and isr["model"]["isr"] == [1, 2]
    assert isr["evidence"] == [{"replica": 3, "leo": 100, "last_caught_up_ms": 1500, "last_fetch_ms": 1500}]
    assert isr["margin_ms"] == 15_000 - 1500 - 10_000


def test_a_shrink_the_rules_do_not_allow_yet_is_missed_by_the_model(run: Run) -> None:
    """The broker shrank at its 10 s run (3 was 8.5 s behind, within the lag); the model only at 15 s."""
    events = story(RUNS_AT_0, isr_updated(10_020, [1, 2], 1, check_ms=10_001), propagated(17_500))
    outcome = run(events, END, **AGENT)
    got = kinds(outcome)
    assert got[0] == ("isr", "missed_by_model") and ("isr", "timing") not in got
    isr = outcome.divergences[0]
    assert isr["ts"] == 10_020 and isr["model"]["ts"] == 15_000 and isr["observed"]["check_ms"] == 10_001
    assert isr["margin_ms"] == 10_001 - 1500 - 10_000  # short of the limit by 1.5 s: no clock read explains it


def test_a_slow_run_checks_its_partitions_up_to_its_end(run: Run) -> None:
    """Found on the lab under load: the broker's run from 15000 took 300 ms and reached t-0 at 15250 (its
    `check_ms`). Kafka checks each partition at its own clock during the run (SPEC §4.7): the model's shrink at
    the run's start and the broker's at 15250 are the same run's when the tick reports its end; without the end
    the 250 ms look like a decision made a run apart."""
    acts = (isr_updated(15_270, [1, 2], 1, check_ms=15_250), propagated(22_500))
    slow_run = [
        ev if ev != tick(15_000, "isr-expiration", broker=1) else {**ev, "end_ms": 15_300}
        for ev in story(RUNS_AT_0, *acts)
    ]
    assert run(slow_run, END, **AGENT).divergences == []
    assert kinds(run(story(RUNS_AT_0, *acts), END, **AGENT)) == [("isr", "unexplained_by_model")]


def test_a_change_is_pending_from_its_check_not_from_its_runs_start(run: Run) -> None:
    """Found on the lab (CI): broker 3 resumed from a stall and its scheduler caught up at once, so a propagation
    run (15100) fell inside an isr-expiration run (15000-15300) before that run's check of t-0 (15200). Kafka
    adds a partition to isrChangeSet only once the check's ZooKeeper write commits (ZkAlterPartitionManager.scala
    3.9 L70-79): the batch of 15100 cannot carry it, the next run's (17500, past the max delay) does. The model
    took the change at the run's start and sent it at 15100."""
    acts = (
        tick(15_000, "isr-expiration", broker=1, end_ms=15_300),
        tick(15_100, "isr-change-propagation", broker=1),
        append(15_000, 200, broker=1, check_ms=15_200),
        isr_updated(15_220, [1, 2], 1, check_ms=15_200),
        propagated(17_500),
    )
    outcome = run(story([10_000, 20_000, 25_000, 30_000, 35_000], *acts), END, **AGENT, isr_change_max_delay_ms=10_000)
    assert [(p["ts"], p["trigger"], p["first_change_ts"]) for p in outcome.propagations] == [
        (17_500, "max_delay", 15_200)
    ]
    assert outcome.divergences == []


def test_a_batch_in_the_same_ms_as_the_check_that_changed_it_is_timing(run: Run) -> None:
    """Found on the lab (CI): a resumed broker's propagation run read the same millisecond as a check of its
    isr-expiration run. The model applies the check first (the agent captured it first) and sends the change in
    that run's batch; Kafka had the change only once the check's ZooKeeper write committed (15220), so its batch
    came a run later. Either side's time of the change explains the difference: timing, both batches."""
    acts = (
        tick(15_000, "isr-expiration", broker=1, end_ms=15_300),
        append(15_000, 200, broker=1, check_ms=15_200),
        tick(15_200, "isr-change-propagation", broker=1),
        isr_updated(15_220, [1, 2], 1, check_ms=15_200),
        propagated(17_500),
    )
    outcome = run(story([10_000, 20_000, 25_000, 30_000, 35_000], *acts), END, **AGENT, isr_change_max_delay_ms=10_000)
    assert [(p["ts"], p["first_change_ts"]) for p in outcome.propagations] == [(15_200, 15_200)]
    assert [(d["ts"], d["kind"]) for d in outcome.divergences] == [(15_200, "timing"), (17_500, "timing")]
    assert [d["cause"] for d in outcome.divergences] == ["shifted", "shifted"]


def test_after_a_write_the_model_missed_the_next_writes_still_pair_across_the_epoch_drift(run: Run) -> None:
    """The broker shrank follower 2 and took it back (epochs 1 and 2), which the model never saw; its epochs now
    run one write behind the broker's. Its shrink of 3 (its epoch 1) is the broker's epoch 3: the same partition,
    kind and ISR within the window, so it pairs; only the two writes the model missed are divergences."""
    expand = {**isr_updated(10_500, [1, 2, 3], 2, check_ms=10_500), "kind": "expand", "isr_before": [1, 3]}
    expand.pop("check_ms")
    expand["out_of_sync"] = []
    acts = (
        isr_updated(10_020, [1, 3], 1, check_ms=10_001, out=[2]),
        expand,
        isr_updated(15_020, [1, 2], 3, check_ms=15_002),
    )
    got = [
        (d["subject"], d["kind"], d["partition_epoch"]) for d in run(story(RUNS_AT_0, *acts), END, **AGENT).divergences
    ]
    assert [g for g in got if g[0] == "isr"] == [("isr", "missed_by_model", 1), ("isr", "missed_by_model", 2)]


def test_which_follower_rejoins_first_right_after_a_write_commits_is_timing(run: Run) -> None:
    """Found on the lab (tests/reality): a leader shrank both followers (committed at 15020) and they came back at
    once. Kafka ran the HW rule when the shrink committed, with follower 3's fetch already in, so 3 rejoined first;
    the model ran it at its decision and took 2 back first (5 ms after the commit). Which one rejoins first hinges
    on the write's latency: timing, with the margin from the commit; the next expand pairs as usual."""

    def expand(ts: int, before: list[int], isr: list[int], epoch: int) -> dict:
        return {**isr_updated(ts, isr, epoch, check_ms=ts), "kind": "expand", "isr_before": before, "out_of_sync": []}

    events = [
        lai(1000, 1, [1, 2, 3], [1, 2, 3], 0, leader_leo=100, hw=100, broker=1),
        fetch(1500, 2, 100, 100, broker=1),
        fetch(1500, 3, 100, 100, broker=1),
        append(2000, 200, broker=1),
        tick(15_000, "isr-expiration", broker=1, end_ms=15_001),
        isr_updated(15_020, [1], 1, check_ms=15_002, out=[2, 3]),
        fetch(15_025, 2, 200, 200, broker=1),
        fetch(15_030, 3, 200, 200, broker=1),
        expand(15_040, [1], [1, 3], 2),
        expand(15_050, [1, 3], [1, 2, 3], 3),
    ]
    divergences = run(events, END, **AGENT).divergences
    assert [(d["kind"], d["partition_epoch"], d["margin_ms"]) for d in divergences] == [("timing", 2, 5)]
    assert divergences[0]["cause"] == "both_expand"


def test_a_shrink_that_hinges_on_the_brokers_clock_read_is_timing_and_so_is_its_batch(run: Run) -> None:
    """Runs at 1.5 s past each 5 s: at 11500 follower 3 is exactly at the limit for the model (now - lcu = lag),
    but the broker read its clock 2 ms later and shrank; the model shrinks at the next run, 16500. The batches
    then differ by this partition only: timing as well."""
    runs = list(range(1500, END, 5000))
    events = story(runs, isr_updated(11_520, [1, 2], 1, check_ms=11_502), propagated(17_500))
    outcome = run(events, END, **AGENT)
    assert kinds(outcome) == [("isr", "timing"), ("propagation", "timing"), ("propagation", "timing")]
    isr, broker_batch, model_batch = outcome.divergences
    assert isr["margin_ms"] == 2 and isr["model"]["ts"] == 16_500 and isr["observed"]["ts"] == 11_520
    assert [d["cause"] for d in outcome.divergences] == ["margin", "shifted", "shifted"]
    assert broker_batch["ts"] == 17_500 and broker_batch["model"] is None
    assert model_batch["ts"] == 22_500 and model_batch["observed"] is None


def test_the_same_write_with_another_isr_is_different_isr(run: Run) -> None:
    events = story(RUNS_AT_0, isr_updated(15_020, [1], 1, check_ms=15_002, out=[2, 3]), propagated(22_500))
    outcome = run(events, END, **AGENT)
    assert kinds(outcome) == [("isr", "different_isr")]
    d = outcome.divergences[0]
    assert d["cause"] is None
    assert d["model"]["isr"] == [1, 2] and d["observed"]["isr"] == [1]


def test_sides_still_inside_the_window_wait(run: Run) -> None:
    """At 20 s the model's 15 s shrink may still meet the broker's write: nothing is judged yet."""
    outcome = run([ev for ev in story(RUNS_AT_0) if ev["ts"] <= 20_000], 20_000, **AGENT)
    assert outcome.divergences == [] and outcome.summary["audit_pending"] == 1


def test_input_without_brokers_is_not_audited(run: Run) -> None:
    """The simulator's events name no broker: the model's shrinks are its own, nothing to compare."""
    events = [{k: v for k, v in ev.items() if k != "broker"} for ev in story(RUNS_AT_0)]
    outcome = run(events, END, **AGENT)
    assert [d["kind"] for d in outcome.decisions].count("shrink") == 1
    assert outcome.divergences == [] and outcome.observed == []


def test_a_write_made_while_the_brokers_previous_write_was_in_flight_is_timing(run: Run) -> None:
    """The broker's shrink of 3 took 2 s to commit in ZooKeeper (Partition.scala: no ISR change starts while one is
    in flight); follower 3 fetched up to the leader meanwhile. The model, whose writes are instant, re-added it
    at once; the broker only after its commit: both expand to [1, 2, 3] as epoch 2, but the model's was made
    while epoch 1 was in flight."""
    shrink = isr_updated(17_000, [1, 2], 1, check_ms=15_002)
    expand = {
        **isr_updated(17_020, [1, 2, 3], 2, check_ms=0),
        "kind": "expand",
        "isr_before": [1, 2],
        "out_of_sync": [],
    }
    del expand["check_ms"]
    events = story(RUNS_AT_0, shrink, fetch(15_500, 3, 200, 200, broker=1), expand, propagated(22_500))
    outcome = run(events, END, **AGENT)
    assert [(d["ts"], d["kind"]) for d in outcome.decisions if d["kind"] in ("shrink", "expand")] == [
        (15_000, "shrink"),
        (15_500, "expand"),
    ]
    assert outcome.divergences == []  # the same ISR: the model was early, not wrong
    other = {**expand, "isr": [1, 3]}  # had the broker re-added another follower first
    outcome = run(
        story(RUNS_AT_0, shrink, fetch(15_500, 3, 200, 200, broker=1), other, propagated(22_500)), END, **AGENT
    )
    [d] = [d for d in outcome.divergences if d["subject"] == "isr"]
    assert (d["kind"], d["margin_ms"]) == ("timing", 15_500 - 17_000)
    assert d["cause"] == "in_flight"


def test_after_a_timing_divergence_the_partition_is_split_until_a_leader_and_isr() -> None:
    """Found on the lab (tests/reality): a resumed leader's shrink took 1.15 s to commit; the model re-added a
    follower at once (timing: in flight), the broker another one after the commit, and from there the two sides'
    ISRs followed different followers for a minute. Those later divergences are consequences of the first one
    (timing) until a LeaderAndIsr gives both sides the controller's state again; after it, a divergence counts."""
    from isrwatch.state.audit import Audit
    from isrwatch.state.config import Config
    from isrwatch.state.records import ReplicaView, ShrinkReason

    def write(ts: int, epoch: int, *, lcu: int) -> IsrWrite:
        view = ReplicaView(replica=3, leo=5, last_caught_up_ms=lcu, last_fetch_ms=lcu)
        return model_write(
            ts, epoch, 1, DecisionKind.SHRINK, [1, 2, 3], [1, 2], reasons={"3": ShrinkReason.STUCK}, evidence=[view]
        )

    audit = Audit(Config(replica_lag_time_max_ms=10_000))
    audit.add(writes=[write(20_000, 1, lcu=10_000 - 50)])  # 50 ms past the lag: the broker saw it a run later
    audit.add(writes=[write(30_000, 2, lcu=10_000)], resyncs=[("c", "t", 0, 40_000)])
    audit.add(writes=[write(50_000, 3, lcu=10_000)])
    judged = audit.advance(100_000)
    got = [(d.partition_epoch, str(d.kind)) for d in judged]
    assert got == [(1, "timing"), (2, "timing"), (3, "unexplained_by_model")]
    assert [(d.cause, d.margin_ms) for d in judged] == [("margin", 50), ("split", 10_000), (None, 30_000)]


def test_a_write_made_while_the_brokers_previous_one_was_in_flight_splits_the_views_even_when_it_agrees() -> None:
    """Found on the lab (tests/reality): a resumed leader's shrink took 1.2 s to commit; the model re-added a
    follower at once (the same write as the broker's after the commit: no divergence) and another one the broker
    only took back 26 s later. From the in-flight write on, the partition's views are split (timing)."""
    from isrwatch.state.audit import Audit
    from isrwatch.state.config import Config
    from isrwatch.state.events import IsrUpdated
    from isrwatch.state.records import Observation

    def broker(ts: int, epoch: int, kind: str, isr: list[int]) -> Observation:
        return Observation(
            event=IsrUpdated(
                ts=ts,
                cluster="c",
                topic="t",
                partition=0,
                broker=3,
                leader=3,
                isr=isr,
                partition_epoch=epoch,
                kind=kind,
            )
        )

    def model(ts: int, epoch: int, isr: list[int]) -> IsrWrite:
        return model_write(ts, epoch, 3, DecisionKind.EXPAND, [3], isr)

    audit = Audit(Config(replica_lag_time_max_ms=10_000))
    audit.add(observed=[broker(11_784, 5, "shrink", [3])])  # committed 1.2 s after its check
    audit.add(writes=[model(10_600, 6, [2, 3])], observed=[broker(11_816, 6, "expand", [2, 3])])
    audit.add(writes=[model(10_636, 7, [1, 2, 3])])  # the broker never took 1 back within the window
    judged = audit.advance(100_000)
    got = [(d.partition_epoch, str(d.kind)) for d in judged]
    assert sorted(got) == [(5, "timing"), (7, "timing")]  # the broker's shrink alone: within the split too
    assert sorted((d.partition_epoch, d.cause, d.margin_ms) for d in judged) == [
        (5, "split", 11_784 - 10_636),  # since the in-flight write 7 (judged first: the model's side)
        (7, "in_flight", 10_636 - 11_816),
    ]


def test_a_change_the_broker_sent_a_batch_earlier_is_the_same_change_displaced() -> None:
    """A resumed broker's isr-expiration run (15000-15300) committed t-0's shrink at 15150 and a propagation run
    inside it (15200) sent it; the model, which has the change from the run's end, sent it with its next batch, which
    t-1's later changes kept back to 25200: past the linger deadline of t-0's change, but the same change in another
    run (timing). A model that also sent it at 15200 sent it twice: that is a divergence."""
    from isrwatch.state.audit import Audit
    from isrwatch.state.config import Config
    from isrwatch.state.events import IsrChangePropagated, IsrUpdated, PartitionName
    from isrwatch.state.records import Observation, Propagation, TopicPartition, Trigger

    def writes(partition: int, decided: int, committed: int, epoch: int) -> tuple[IsrWrite, Observation]:
        model = model_write(decided, epoch, 1, DecisionKind.EXPAND, [1, 2], [1, 2, 3], partition=partition)
        event = IsrUpdated(
            ts=committed,
            cluster="c",
            broker=1,
            topic="t",
            partition=partition,
            leader=1,
            isr=[1, 2, 3],
            partition_epoch=epoch,
            kind="expand",
        )
        return model, Observation(event=event)

    def broker_batch(ts: int, *partitions: int) -> IsrChangePropagated:
        return IsrChangePropagated(ts=ts, cluster="c", broker=1, partitions=[PartitionName("t", p) for p in partitions])

    def model_batch(ts: int, *partitions: int) -> Propagation:
        return Propagation(
            ts=ts,
            cluster="c",
            broker=1,
            partitions=[TopicPartition("t", p) for p in partitions],
            trigger=Trigger.LINGER,
            first_change_ts=15_000,
            last_change_ts=19_002,
        )

    def audited(*model_batches: Propagation) -> list[tuple[int, str]]:
        audit = Audit(Config(replica_lag_time_max_ms=10_000))
        for model, broker in (writes(0, 15_000, 15_150, 1), writes(1, 17_000, 17_002, 1), writes(1, 19_000, 19_002, 2)):
            audit.add(writes=[model], observed=[broker])
        audit.add(observed=[broker_batch(15_200, 0), broker_batch(25_200, 1)], batches=model_batches)
        return [(d.ts, str(d.kind), d.cause) for d in audit.advance(100_000) if d.subject == "propagation"]

    assert [got[:2] for got in audited(model_batch(25_200, 0, 1))] == [(15_200, "timing"), (25_200, "timing")]
    assert [got[:2] for got in audited(model_batch(15_200, 0), model_batch(25_200, 0, 1))] == [
        (25_200, "different_batch")
    ]
    assert audited(model_batch(25_200, 0, 1)) == [(15_200, "timing", "shifted"), (25_200, "timing", "displaced")]


@pytest.mark.spark_parity
def test_a_split_ends_when_a_later_pair_of_writes_agrees_so_a_real_divergence_a_minute_later_counts(run: Run) -> None:
    """One slow clock read must not silence a partition's audit: at 11500 follower 3 is exactly at the lag limit for
    the model, the broker read its clock 2 ms later and shrank (timing: margin). 3 rejoins at 20000 and both sides
    write the same expand: the views agree again. 3 stops again after 60000; the model shrinks it at 71500, the
    broker never does. That shrink is a real divergence, not a consequence of the first one."""
    end = 90_000

    def leo(ts: int) -> int:  # a record appended at 2000 and one at 62000
        return 200 if ts < 62_000 else 300

    expand = {**isr_updated(20_010, [1, 2, 3], 2, check_ms=0), "kind": "expand", "isr_before": [1, 2]}
    del expand["check_ms"]
    expand["out_of_sync"] = []
    events = [
        lai(1000, 1, [1, 2, 3], [1, 2, 3], 0, leader_leo=100, hw=100, broker=1),
        fetch(1500, 3, 100, 100, broker=1),
        fetch(1500, 2, 100, 100, broker=1),
        append(2000, 200, broker=1),
        append(62_000, 300, broker=1),
        *(fetch(ts, 2, leo(ts), leo(ts), broker=1) for ts in range(6500, end, 5000)),
        *(fetch(ts, 3, 200, 200, broker=1) for ts in range(20_000, 60_001, 5000)),
        *(tick(ts, "isr-expiration", broker=1) for ts in range(1500, end, 5000)),
        *(tick(ts, "isr-change-propagation", broker=1) for ts in range(2500, end, 2500)),
        isr_updated(11_520, [1, 2], 1, check_ms=11_502),
        expand,
    ]
    outcome = run(sorted(events, key=lambda ev: ev["ts"]), end, **AGENT)
    writes = [(d["ts"], d["kind"]) for d in outcome.decisions if d["kind"] in ("shrink", "expand")]
    assert writes == [(16_500, "shrink"), (20_000, "expand"), (71_500, "shrink")]
    isr = [(d["ts"], d["kind"], d["cause"], d["margin_ms"]) for d in outcome.divergences if d["subject"] == "isr"]
    assert isr == [(11_520, "timing", "margin", 2), (71_500, "unexplained_by_model", None, 1_500)]


def test_the_timing_rules_are_one_ordered_table_named_as_the_causes() -> None:
    """SPEC §7 numbers the rules by these names; a divergence's `cause` is the name of the rule that excused it."""
    from isrwatch.state.audit import RULES
    from isrwatch.state.records import Cause

    assert [rule.name for rule in RULES] == [str(cause) for cause in Cause]
    assert [rule.check.__name__ for rule in RULES] == [
        "in_flight",
        "both_expand",
        "margin",
        "shifted",
        "displaced",
        "deposed",
        "applying",
        "fetch_order",
        "reproposed",
        "split",
    ]


def _proposal(ts: int, leader: int, isr_before: list[int], isr: list[int], **view: Any) -> Any:
    """A broker's AlterPartition proposal of t-0 from epoch 4 (observed), with the model's record of follower 3."""
    from isrwatch.state.records import Observation, ProposedIsr, ReplicaView

    kind = "expand" if len(isr) > len(isr_before) else "shrink"
    event = ProposedIsr(ts, "c", "t", 0, leader, 0, 5, kind, isr, isr_before)
    evidence = [ReplicaView(replica=3, leo=10, last_caught_up_ms=0, last_fetch_ms=view.get("fetch_ms", 0))]
    return Observation(event=event, model_leader=1, evidence=evidence)


def _case_at(cause: str, m: int) -> tuple[Any, Any]:
    """A partition's audit and a case that `cause`'s rule gives margin `m` (SPEC §7: each rule's margin)."""
    from isrwatch.state.audit import Case, PartitionAudit, Proposed, Send, Span
    from isrwatch.state.events import IsrUpdated
    from isrwatch.state.records import Observation

    t = 100_000
    p = PartitionAudit()
    if cause == "in_flight":
        p.commits = {(1, 4): t}
        return p, Case(t + m, 1, write=model_write(t + m, 5, 1, DecisionKind.SHRINK, [1, 2, 3], [1, 2]))
    if cause == "both_expand":
        p.commits = {(1, 4): t}
        broker = IsrUpdated(ts=t + m, topic="t", partition=0, broker=1, leader=1, isr=[1, 2, 3], partition_epoch=5,
                            kind="expand", cluster="c")  # fmt: skip
        mine = model_write(t + m, 5, 1, DecisionKind.EXPAND, [1, 2], [1, 2, 4])
        return p, Case(t + m, 1, write=mine, observed=Observation(event=broker))
    if cause == "margin":
        return p, Case(t, 1, margin_ms=m)
    if cause in ("shifted", "displaced"):
        p.spans = [Span(1, t, t + 10_000)]  # the sides a window apart
        p.sent = [Send(1, t, by_broker=False)]
        return p, Case(t + m, 1, carried_by_broker=True)
    if cause == "deposed":
        p.joins = [t]
        return p, Case(t + m, 2, observed=_proposal(t + m, 2, [1, 2, 3], [2]))
    if cause == "applying":
        p.commits = {(1, 4): t}
        return p, Case(t + 50, 1, observed=_proposal(t + 50, 1, [1, 2], [1, 2, 3], fetch_ms=t + m))
    if cause == "fetch_order":
        mine = model_write(t, 5, 1, DecisionKind.EXPAND, [1, 2], [1, 2, 4])
        return p, Case(t, 1, write=mine, observed=_proposal(t, 1, [1, 2], [1, 2, 3], fetch_ms=t + m))
    if cause == "reproposed":
        p.proposed = [Proposed(1, 5, (1, 2), t)]
        return p, Case(t + m, 1, observed=_proposal(t + m, 1, [1, 2, 3], [1, 2]))
    assert cause == "split"
    p.splits = [t]
    return p, Case(t + m, 1, write=model_write(t + m, 5, 1, DecisionKind.SHRINK, [1, 2, 3], [1, 2]))


# Each rule's bound with the audit of a 10 s lag (window 10 s, audit_timing_ms 100, linger 5 s, propagation every
# 2.5 s, max delay 60 s; SEND_HELD_MS 30 s): every margin at either end is inside, one ms past it outside.
BOUNDS = {
    "in_flight": (-30_000, 0),
    "both_expand": (1, 100),
    "margin": (-100, 100),
    "shifted": (0, 10_000 + 5_000 + 2_500),
    "displaced": (1, 60_000),
    "deposed": (0, 30_000),
    "applying": (-100, 0),
    "fetch_order": (-100, 100),
    "reproposed": (1, 10_000),
    "split": (0, 15_000),
}


@pytest.mark.parametrize("cause", list(BOUNDS))
def test_every_timing_rule_excuses_up_to_its_bound_and_not_one_ms_past_it(cause: str) -> None:
    """No excuse is unbounded (SPEC §7's table): each rule, called on a case at each end of its bound, calls it timing
    with that margin, and one ms outside either end does not."""
    from isrwatch.state.audit import RULES, Audit, Bound, Excuse
    from isrwatch.state.config import Config

    audit = Audit(Config(replica_lag_time_max_ms=10_000))
    (rule,) = [r for r in RULES if r.name == cause]
    lo, hi = BOUNDS[cause]
    assert rule.bound(audit) == Bound(lo, hi)
    for m in (lo, hi):
        assert rule.applies(audit, *_case_at(cause, m)) == Excuse(rule.name, m), m
    for m in (lo - 1, hi + 1):
        assert rule.applies(audit, *_case_at(cause, m)) is None, m


def test_an_audit_state_of_another_version_is_a_clear_error() -> None:
    """Version 2 kept ten parallel tuple lists; its blob is refused naming both versions and what to do."""
    import msgspec

    from isrwatch.state.audit import STATE_VERSION, Audit
    from isrwatch.state.config import Config

    old = msgspec.msgpack.encode([2, [], [], [], [], [], [], [], [], [], []])
    with pytest.raises(ValueError, match=rf"audit state version 2 is not {STATE_VERSION}: .*new --checkpoint"):
        Audit(Config(), old)
    fresh = Audit(Config())
    assert Audit(Config(), fresh.to_bytes()).to_bytes() == fresh.to_bytes()
