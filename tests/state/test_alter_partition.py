"""SPEC §4.9: ISR changes in flight. AlterPartition proposals through each broker's manager, and (3.1+, with the
agent) a leader's own ZooKeeper write that stays in flight until the broker reports its commit.

Citations are to apache/kafka 3.9.0-rc3 (`Partition` = core/src/main/scala/kafka/cluster/Partition.scala,
`AlterPartitionManager` = core/src/main/scala/kafka/server/AlterPartitionManager.scala); the scenarios under
tests/scenarios (09-19) restate Kafka's own tests of this path.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from isrwatch.state.alter_partition import HANDLING_BOUND_MS, AlterPartitionBook
from isrwatch.state.audit import SEND_HELD_MS
from isrwatch.state.config import Config
from isrwatch.state.engine import PartitionEngine
from isrwatch.state.propagation import PropagationBook
from isrwatch.state.records import DecisionKind
from isrwatch.state.replay import ReplayResult, replay
from isrwatch.state.step import settle
from tests.support.state import Run, append, fetch, follower, kinds, lai, parse_all, state_of, tick

T = 1_000_000
LAG = 10_000


def isr_updated(ts: int, isr_before: list[int], isr: list[int], epoch: int, kind: str, **extra) -> dict:
    return {
        "type": "isr_updated",
        "ts": ts,
        "topic": "ledger",
        "partition": 0,
        "broker": 1,
        "leader": 1,
        "isr_before": isr_before,
        "isr": isr,
        "partition_epoch": epoch,
        "kind": kind,
        "out_of_sync": [],
        **extra,
    }


def ledger_0(reports_writes: bool) -> list[dict]:
    """ledger-0 on the 3.9 lab (ZooKeeper mode, IBP 2.6), led by broker 1, during two overlapping stalls: 2 was
    shrunk earlier (the broker reported that write), 3 is stalled; 2 catches up and is expanded back in the same
    millisecond as broker 1's isr-expiration run, which starts after the fetch."""
    at = {"topic": "ledger", "broker": 1}
    events = [
        tick(T - 1, "isr-expiration", broker=1, kafka_version="3.9.2"),
        lai(T, 1, [1, 3], [1, 2, 3], 0, leader_leo=100, hw=100, partition_epoch=4, **at),
        fetch(T + 100, 3, 100, 100, **at),  # 3's last fetch: it stalls
        append(T + 200, 200, **at),
        fetch(T + 15_000, 2, 100, 200, **at),  # 2 at the HW, behind the leader: expanded back at once
        tick(T + 15_000, "isr-expiration", broker=1),  # the same millisecond, after the fetch
        tick(T + 20_000, "isr-expiration", broker=1),
    ]
    if reports_writes:
        # The broker reported an earlier write of this partition (2's shrink) and, 57 ms later, this expand's commit.
        events.insert(2, isr_updated(T + 50, [1, 2, 3], [1, 3], 4, "shrink"))
        events.insert(6, isr_updated(T + 15_057, [1, 3], [1, 2, 3], 5, "expand"))
    return events


def test_a_3x_write_stays_in_flight_until_the_broker_reports_its_commit(run: Run) -> None:
    """The ledger-0 case: Kafka 3.9 skips a partition whose write is in flight (Partition L1245, L1309-1312
    `if (!current.isInflight)`); the model, which took the write as instantaneous, shrank [1,2,3] to [1] in the
    same run, a shrink the broker made only 57 s later. Now the expand is pending until `isr_updated` commits it,
    the run at 15000 skips the partition, and the next run decides on the committed ISR."""
    outcome = run(ledger_0(reports_writes=True), replica_lag_time_max_ms=LAG, isr_expiration_interval_ms=0)
    decided = [(d["ts"] - T, d["kind"], d["isr_after"]) for d in outcome.decisions if d["kind"] != "leader_and_isr"]
    assert decided == [(15_000, "expand", [1, 2, 3]), (20_000, "shrink", [1])]  # none at 15000
    assert outcome.decisions[-1]["isr_before"] == [1, 2, 3]  # decided on the ISR the broker committed at 15057
    state = state_of(outcome, "ledger")
    assert (state["isr"], state["partition_epoch"], state["isr_state"]) == ([1, 2, 3], 5, "pending_shrink")


@pytest.mark.parametrize("named_at", [T - 1, T + 1], ids=["before-its-leader-and-isr", "after-it"])
def test_a_leader_whose_ticks_name_its_isr_protocol_holds_its_first_write_in_flight(run: Run, named_at: int) -> None:
    """An agent that names its broker's ISR protocol on its ticks reports every ISR write, so the partition's first
    one is in flight too (`leader_reports_writes`), where the model used to wait for the partition's first report.
    On the lab a resumed leader's first shrink of payments-1 reached ZooKeeper 1.9 s after its check; Kafka kept the
    partition pending (Partition L1023) and the model, which took that write as instantaneous, expanded twice. Here
    ledger-0 without the earlier report: the same outcome as with it, whether the protocol is named before the
    partition's LeaderAndIsr (taken then) or after it (taken by the tick)."""
    events = [e for e in ledger_0(reports_writes=True) if e["ts"] != T + 50]  # no earlier write reported
    events.insert(1 if named_at > T else 0, tick(named_at, "isr-expiration", broker=1, isr_protocol="zookeeper"))
    outcome = run(events, replica_lag_time_max_ms=LAG, isr_expiration_interval_ms=0)
    decided = [(d["ts"] - T, d["kind"], d["isr_after"]) for d in outcome.decisions if d["kind"] != "leader_and_isr"]
    assert decided == [(15_000, "expand", [1, 2, 3]), (20_000, "shrink", [1])]  # none at 15000: the expand pending
    state = state_of(outcome, "ledger")
    assert (state["isr"], state["partition_epoch"], state["isr_state"]) == ([1, 2, 3], 5, "pending_shrink")


def test_without_the_brokers_report_a_write_takes_no_time(run: Run) -> None:
    """Without the agent's `isr_updated` the model cannot know when a write commits: it stays instantaneous, as in
    every ZooKeeper-mode rule set (the run at 15000 shrinks the ISR the expand just wrote)."""
    outcome = run(ledger_0(reports_writes=False), replica_lag_time_max_ms=LAG, isr_expiration_interval_ms=0)
    assert [k for _, k in kinds(outcome)][1:] == ["expand", "shrink"]
    shrink = outcome.decisions[-1]
    assert (shrink["ts"] - T, shrink["isr_before"], shrink["isr_after"]) == (15_000, [1, 2, 3], [1])
    assert "isr_state" not in state_of(outcome, "ledger")  # ZooKeeper-mode records keep their keys


AP = {"replica_lag_time_max_ms": LAG, "kafka_version": "3.9.2", "isr_protocol": "alter_partition"}
AGENT_AP = {**AP, "isr_expiration_interval_ms": 0}  # the brokers' own isr-expiration runs only


def test_the_broker_record_shows_its_queue_and_the_request_in_flight_with_its_age() -> None:
    """DefaultAlterPartitionManager (AlterPartitionManager L142-180): one request in flight, the rest queued."""
    config = Config(**AP, isr_expiration_interval_ms=0)
    engine = PartitionEngine(config)
    engine.add(
        parse_all(
            [lai(T, 1, [1], [1, 2], 0, leader_leo=10, hw=10, partition=p) for p in range(2)]
            + [fetch(T + 100, 2, 10, 10, partition=0), fetch(T + 300, 2, 10, 10, partition=1)]
        )
    )
    settled = settle(PropagationBook(config), [engine.advance(T + 1001)], T + 1001, managers=AlterPartitionBook())
    (broker,) = settled.brokers
    assert broker.in_flight is not None and broker.in_flight.sent_ms == T + 100
    assert [i.partition for i in broker.in_flight.partitions] == [0]
    assert [(i.partition, i.proposed_isr, i.submitted_ms) for i in broker.queue or []] == [(1, [1, 2], T + 300)]
    assert broker.in_flight_age_ms == 900
    assert settled.alter_partitions == []


def test_the_metadata_of_an_epoch_the_answer_committed_drops_the_change_proposed_since(run: Run) -> None:
    """KRaft 4.4.0 lab, a leader resumed from a stall (tests/reality): its shrink commits by the answer (epoch 1: the
    Partition applies it, `isr_updated`), it proposes an expand, then applies the shrink's metadata (epoch 1 again):
    makeLeader takes it and drops the pending expand (`drops_pending`). The next fetch's expand is refused at once
    (the manager holds the first), the first's answer is stale, and the leader then proposes from epoch 1 again, as
    the broker did (INVALID_UPDATE_VERSION)."""
    kraft = {"broker": 1, "controller_epoch": -1}
    events = [
        lai(T, 1, [1, 2, 3], [1, 2, 3], 0, leader_leo=10, hw=10, **kraft),
        tick(T + 1, broker=1, kafka_version="4.4.0", isr_protocol="alter_partition"),
        fetch(T + 100, 2, 10, 10),
        fetch(T + 100, 3, 10, 10),
        append(T + 200, 20),
        tick(T + LAG + 300, "isr-expiration", broker=1, end_ms=T + LAG + 300),  # both followers out: shrink to [1]
        {"type": "alter_partition_response", "ts": T + LAG + 400, "topic": "t", "partition": 0, "broker": 1,
         "error": None, "isr": [1], "leader_epoch": 0, "partition_epoch": 1},
        isr_updated(T + LAG + 450, [1, 2, 3], [1], 1, "shrink", topic="t"),  # the Partition applies the answer
        fetch(T + LAG + 500, 3, 20, 20),  # expand [1, 3] proposed from epoch 1
        lai(T + LAG + 600, 1, [1], [1, 2, 3], 0, partition_epoch=1, **kraft),  # the shrink's metadata: drops it
        fetch(T + LAG + 700, 3, 20, 20),  # refused at once: the manager holds the expand
        {"type": "alter_partition_response", "ts": T + LAG + 800, "topic": "t", "partition": 0, "broker": 1,
         "error": None, "isr": [1, 3], "leader_epoch": 0, "partition_epoch": 2},  # stale
        fetch(T + LAG + 900, 2, 20, 20),  # expand [1, 2] proposed from epoch 1 again
        {"type": "alter_partition_response", "ts": T + LAG + 950, "topic": "t", "partition": 0, "broker": 1,
         "error": "INVALID_UPDATE_VERSION"},
    ]  # fmt: skip
    outcome = run(events, T + LAG + 1000, **AP, isr_expiration_interval_ms=0)
    proposals = [(i["proposed_isr"], i["partition_epoch"]) for r in outcome.alter_partitions for i in r["partitions"]]
    assert proposals == [([1], 0), ([1, 3], 1), ([1, 2], 1)]
    assert outcome.summary["failed_isr_updates_by_reason"] == {
        "INVALID_UPDATE_VERSION": 1,
        "OPERATION_NOT_ATTEMPTED": 1,
    }
    assert outcome.summary["ignored_alter_partition_responses_by_reason"]["stale"] == 1


# docs/evidence/kraft-expand-race: broker 2's events of payments-2 (its first metadata, then 06:18:03-06:18:22), its
# isr-expiration ticks and its requests' payments-2 items, from the KRaft 4.4.0 lab run of 2026-11-29.
EXPAND_RACE = Path(__file__).parent / "data" / "kraft-expand-race.jsonl"


def test_an_answer_the_leader_applied_to_a_proposal_made_after_the_metadata_commits_it() -> None:
    """A resumed leader's shrink commits by its answer (epoch 1); a fetch of replica 1 at the HW is applied at
    18.396, the shrink's metadata (epoch 1 again) at 18.428, and the broker submits the expand at 18.546: its
    maybeExpandIsr waited for the write lock the makeLeader held. The model proposes at the fetch, so the metadata
    drops its proposal (`drops_pending`); the broker's request, sent after it, is the Partition's proposal in flight
    (`proposed_after_the_metadata`), which the answer commits when the Partition applies it (`isr_updated`, epoch 2);
    then the model proposes [1, 2, 3] from epoch 2 with the broker. Before, it stayed at [2] and proposed [1, 2]
    again after the commit: unexplained_by_model, then missed_by_model."""
    result = _replay_expand_race(EXPAND_RACE.read_bytes().splitlines())
    assert result.summary["divergences_by_kind"] == {}
    assert result.summary["audit_pending"] == 0
    expands = [(d.ts, d.isr_before, d.isr_after) for d in result.decisions if d.kind == DecisionKind.EXPAND]
    assert expands == [(1_795_933_098_396, [2], [1, 2]), (1_795_933_099_233, [1, 2], [1, 2, 3])]
    # The fetches between the broker's request and its answer propose nothing, as Kafka's (`isInflight`); refused,
    # while the manager holds a dropped proposal: replica 3's at 098511 (before the request) and at 099484 (after
    # the metadata of epoch 2 dropped the [1, 2, 3] sent at 099243, in Kafka too).
    assert result.summary["failed_isr_updates_by_reason"] == {"OPERATION_NOT_ATTEMPTED": 2}


def _replay_expand_race(lines: list[bytes]) -> ReplayResult:
    return replay([lines], Config(replica_lag_time_max_ms=5000).with_profile("agent"), until=1_795_933_110_000)


APPLIED_MS = 1_795_933_099_107  # the Partition applies the answer of 1_795_933_099_105: its `isr_updated`


def test_a_fetch_between_the_answer_and_the_partition_applying_it_expands_nothing() -> None:
    """CI's KRaft reality failure (docs/evidence/kraft-answer-in-flight): the same race, with the Partition applying
    the answer 95 ms after its manager took it (the callback waits for the write lock, DefaultAlterPartitionManager
    @4.4 L266-270; on a loaded machine), so replica 1's fetch at 099173 comes in between. Kafka's Partition is still
    pending there (`isInflight`, Partition.scala@4.4 L877). The model had dropped its own proposal, and the answer
    took its manager's item out: it proposed [1, 2] from epoch 1 again at that fetch (unexplained_by_model), then
    ignored the `isr_updated` (its own proposal was pending) and missed the broker's [1, 2, 3] from epoch 2."""
    late = [
        line.replace(b'"ts":%d,' % APPLIED_MS, b'"ts":%d,' % (APPLIED_MS + 93)) if b'"isr_updated"' in line else line
        for line in EXPAND_RACE.read_bytes().splitlines()
    ]
    assert late != EXPAND_RACE.read_bytes().splitlines()
    result = _replay_expand_race(late)
    assert result.summary["divergences_by_kind"] == {}
    expands = [(d.ts, d.isr_before, d.isr_after) for d in result.decisions if d.kind == DecisionKind.EXPAND]
    assert expands == [(1_795_933_098_396, [2], [1, 2]), (1_795_933_099_233, [1, 2], [1, 2, 3])]


# docs/evidence/kraft-answer-in-flight: leader 3's events of orders-0, orders-1 and payments-1 (their metadata before,
# its first tick, then 1795940709000-1795940721000), from a KRaft 4.4.0 lab stall of broker 3 (the nodes on one core).
ANSWER_IN_FLIGHT = Path(__file__).parent / "data" / "kraft-answer-in-flight.jsonl"


def test_a_request_sent_after_the_metadata_is_in_flight_or_its_answer_is_ignored() -> None:
    """Leader 3 resumed from its stall and shrank the three partitions to [3]. The model proposed [1, 3] of each at
    follower 1's fetches (0305-0307); the metadata of the shrinks dropped those proposals (0308; payments-1's at
    0364). The broker's request with the three expands went at 0366, behind a request in flight since 0295.
    - orders-0 and orders-1: the broker proposed after the metadata (the fetch waited for makeLeader's write lock),
      so its Partition held the proposal until the metadata of the answer (0424): follower 2's fetches at 0415 and
      0422 expanded nothing; then [1, 2, 3] from the new epoch (sent 0460). Before (`proposed_after_the_metadata`
      missing), the model expanded [2, 3] from the old epoch there (unexplained_by_model) and missed [1, 2, 3].
    - payments-1: proposed before its metadata, which dropped it; the answer was ignored and follower 2's next fetch
      proposed [2, 3] from the old epoch (sent 0460, INVALID_UPDATE_VERSION). The model, taking the request for one
      in flight, made no such proposal: the audit's `reproposed` (same leader and base epoch) calls it timing."""
    lines = ANSWER_IN_FLIGHT.read_bytes().splitlines()
    result = replay([lines], Config(replica_lag_time_max_ms=5000).with_profile("agent"), until=1_795_940_735_000)
    found = [(d.kind, d.cause, d.topic, d.partition, d.margin_ms) for d in result.divergences]
    assert found == [("timing", "reproposed", "payments", 1, 94)]
    assert result.summary["audit_pending"] == 0
    expands = [
        (d.ts - 1_795_940_720_000, d.topic, d.partition, d.isr_before, d.isr_after)
        for d in result.decisions
        if d.kind == DecisionKind.EXPAND and d.ts > 1_795_940_720_000
    ]
    assert expands == [
        (305, "orders", 0, [3], [1, 3]),
        (307, "orders", 1, [3], [1, 3]),
        (307, "payments", 1, [3], [1, 3]),
        (429, "orders", 1, [1, 3], [1, 2, 3]),
        (430, "payments", 1, [1, 3], [1, 2, 3]),
        (441, "orders", 0, [1, 3], [1, 2, 3]),
    ]


# The KRaft 4.4.0 lab's leader 1 of t-0 (replicas 1, 2, 3), reporting through the agent: its metadata, its rules.
KRAFT = {"broker": 1, "controller_epoch": -1}


def kraft_leader(isr: list[int]) -> list[dict]:
    return [
        lai(T, 1, isr, [1, 2, 3], 0, leader_leo=10, hw=10, **KRAFT),
        tick(T + 1, broker=1, kafka_version="4.4.0", isr_protocol="alter_partition"),
    ]


def sent(ts: int, isr: list[int], partition_epoch: int) -> dict:
    """The agent's `alter_partition_sent`: broker 1's request carrying t-0's item."""
    item = {"topic": "t", "partition": 0, "isr": isr, "leader_epoch": 0, "partition_epoch": partition_epoch}
    return {"type": "alter_partition_sent", "ts": ts, "broker": 1, "partitions": [item]}


def answer(ts: int, error: str | None = None, isr: list[int] | None = None, partition_epoch: int = 0) -> dict:
    """The agent's `alter_partition_response` for t-0 (an error: for the whole request or for t-0)."""
    body = {"error": error} if error else {"isr": isr, "leader_epoch": 0, "partition_epoch": partition_epoch}
    return {"type": "alter_partition_response", "ts": ts, "topic": "t", "partition": 0, "broker": 1, **body}


def registration(ts: int, fenced: bool, *, reporter: int = 1, epoch: int = 12) -> dict:
    """Broker `reporter`'s metadata about broker 2 (`broker_registration`)."""
    body = {"id": 2, "epoch": epoch, "fenced": fenced, "in_controlled_shutdown": False}
    return {"type": "broker_registration", "ts": ts, "broker": reporter, **body}


def requests(outcome) -> list[tuple[int, list[int], int, str | None]]:
    """The model's requests of t-0: when each went, its proposed ISR and base epoch, and its answer's error."""
    return [
        (r["sent_ms"] - T, i["proposed_isr"], i["partition_epoch"], i["error"])
        for r in outcome.alter_partitions
        for i in r["partitions"]
    ]


def test_after_a_top_level_error_the_manager_resends_the_same_item_50_ms_later(run: Run) -> None:
    """KRaft 4.4.0 lab, kill and restart, controller failover: a leader's request answered STALE_BROKER_EPOCH (the
    controller checks the broker epoch for the whole request) is sent again 50 ms later, unchanged, until an answer
    takes it: DefaultAlterPartitionManager@4.4 L160-175 (`scheduleOnce("send-alter-partition", …, 50)`), the
    partition's callback never runs (it stays pending, no FailedIsrUpdates mark). The brokers sent hundreds of such
    resends in a few seconds; each is the proposal the leader made once, so the audit pairs none of them again."""
    events = [
        *kraft_leader([1, 2]),
        fetch(T + 100, 3, 10, 10),  # 3 caught up: expand [1, 2, 3] from epoch 0
        sent(T + 102, [1, 2, 3], 0),
        answer(T + 110, "STALE_BROKER_EPOCH"),
        sent(T + 161, [1, 2, 3], 0),  # the resend, 50 ms (and the scheduler's 1 ms) later
        answer(T + 170, "STALE_BROKER_EPOCH"),
        sent(T + 221, [1, 2, 3], 0),
        answer(T + 240, isr=[1, 2, 3], partition_epoch=1),
        isr_updated(T + 245, [1, 2], [1, 2, 3], 1, "expand", topic="t"),
    ]
    outcome = run(events, T + 60_000, **AP, isr_expiration_interval_ms=0)
    assert requests(outcome) == [
        (100, [1, 2, 3], 0, "STALE_BROKER_EPOCH"),
        (160, [1, 2, 3], 0, "STALE_BROKER_EPOCH"),
        (220, [1, 2, 3], 0, None),
    ]
    assert [(d["ts"] - T, d["kind"]) for d in outcome.decisions if d["kind"] != "leader_and_isr"] == [(100, "expand")]
    assert outcome.divergences == []
    assert outcome.summary["failed_isr_updates_by_reason"] == {}
    assert outcome.summary["ignored_alter_partition_responses_by_reason"] == {"top_level_error": 2}
    assert state_of(outcome)["isr"] == [1, 2, 3]


@pytest.mark.parametrize(("error", "top_level"), [("UNKNOWN_SERVER_ERROR", True), ("STALE_BROKER_EPOCH", None)])
def test_every_top_level_error_keeps_the_items_for_a_resend_whatever_its_name(
    run: Run, error: str, top_level: bool | None
) -> None:
    """Kafka 3.9 treats every top-level error of an AlterPartition response alike: handleAlterPartitionResponse takes
    items out only for NONE (AlterPartitionManager@3.9.0-rc3 L375-379) and the resend goes 50 ms later (L224-231).
    The agent says which errors are the request's (`top_level`); an answer without the field is told by its name.
    The model took an UNKNOWN_SERVER_ERROR marked top-level as the partition's own: it counted a failed ISR update
    and proposed again at once."""
    refused = {**answer(0, error), "top_level": top_level} if top_level is not None else answer(0, error)
    events = [
        *kraft_leader([1, 2]),
        fetch(T + 100, 3, 10, 10),
        sent(T + 102, [1, 2, 3], 0),
        {**refused, "ts": T + 110},
        sent(T + 161, [1, 2, 3], 0),  # the resend, 50 ms later
        answer(T + 240, isr=[1, 2, 3], partition_epoch=1),
        isr_updated(T + 245, [1, 2], [1, 2, 3], 1, "expand", topic="t"),
    ]
    outcome = run(events, T + 60_000, **AGENT_AP)
    assert requests(outcome) == [(100, [1, 2, 3], 0, error), (160, [1, 2, 3], 0, None)]
    assert outcome.summary["failed_isr_updates_by_reason"] == {}
    assert outcome.summary["ignored_alter_partition_responses_by_reason"] == {"top_level_error": 1}
    assert state_of(outcome)["isr"] == [1, 2, 3]


def test_a_submit_during_the_backoff_sends_at_once_with_the_items_held(run: Run) -> None:
    """The backoff is no in-flight request: a proposal submitted meanwhile goes at once with the items the manager
    still holds (submit -> maybePropagateIsrChanges, DefaultAlterPartitionManager@4.4 L104-124), and the scheduled
    resend then finds that request in flight and sends nothing."""
    other = {"topic": "t", "partition": 1}
    events = [
        *kraft_leader([1, 2]),
        lai(T, 1, [1, 2], [1, 2, 3], 0, leader_leo=10, hw=10, **KRAFT, partition=1),
        fetch(T + 100, 3, 10, 10),
        sent(T + 102, [1, 2, 3], 0),
        answer(T + 110, "STALE_BROKER_EPOCH"),
        fetch(T + 130, 3, 10, 10, partition=1),  # t-1's expand: sent at once with t-0's item
        {**sent(T + 131, [1, 2, 3], 0), "partitions": [
            {"topic": "t", "partition": p, "isr": [1, 2, 3], "leader_epoch": 0, "partition_epoch": 0} for p in (0, 1)]},
        answer(T + 150, isr=[1, 2, 3], partition_epoch=1),
        {**answer(T + 150, isr=[1, 2, 3], partition_epoch=1), **other},
    ]  # fmt: skip
    outcome = run(events, T + 60_000, **AP, isr_expiration_interval_ms=0)
    went = [
        (r["sent_ms"] - T, [(i["partition"], i["error"]) for i in r["partitions"]]) for r in outcome.alter_partitions
    ]
    assert went == [(100, [(0, "STALE_BROKER_EPOCH")]), (131, [(0, None), (1, None)])]  # at the broker's send
    assert outcome.divergences == []


def test_an_answer_commits_when_the_partition_applies_it_not_when_the_manager_receives_it(run: Run) -> None:
    """KRaft 4.4.0 lab: the manager receives the answer (the agent's `alter_partition_response`), then the
    Partition's callback applies it under the partition's lock a few to tens of ms later (`isr_updated`;
    Partition@3.9.0-rc3 L1852-1879, L1953-1981), or the metadata path applies it first (`leader_and_isr`). A fetch in
    between finds the expand still in flight (L1023) and proposes nothing; the model proposed [1, 2, 3] there, a
    request the broker never sent. Then the next fetch after the commit expands from the new epoch, as the broker
    did."""
    applied = {
        "isr_updated": isr_updated(T + 150, [1], [1, 2], 1, "expand", topic="t"),
        "leader_and_isr": lai(T + 150, 1, [1, 2], [1, 2, 3], 0, partition_epoch=1, **KRAFT),
    }
    for path, commit in applied.items():
        events = [
            *kraft_leader([1]),
            fetch(T + 100, 2, 10, 10),  # expand [1, 2] from epoch 0
            fetch(T + 101, 3, 10, 10),  # in flight: nothing
            sent(T + 102, [1, 2], 0),
            answer(T + 140, isr=[1, 2], partition_epoch=1),
            fetch(T + 142, 3, 10, 10),  # answered, not applied yet: still nothing
            commit,
            fetch(T + 160, 3, 10, 10),  # expand [1, 2, 3] from epoch 1
            sent(T + 161, [1, 2, 3], 1),
            answer(T + 200, isr=[1, 2, 3], partition_epoch=2),
            isr_updated(T + 205, [1, 2], [1, 2, 3], 2, "expand", topic="t"),
        ]
        outcome = run(events, T + 60_000, **AP, isr_expiration_interval_ms=0)
        decided = [(d["ts"] - T, d["isr_after"]) for d in outcome.decisions if d["kind"] == "expand"]
        assert decided == [(100, [1, 2]), (160, [1, 2, 3])], path
        assert requests(outcome) == [(100, [1, 2], 0, None), (161, [1, 2, 3], 1, None)], path
        assert outcome.divergences == [], path


def test_two_proposals_from_one_epoch_each_pair_with_the_brokers_request(run: Run) -> None:
    """KRaft 4.4.0 lab: a leader proposes several times from one partition epoch when a proposal is refused or reverted
    (here INELIGIBLE_REPLICA, Partition@3.9.0-rc3 L1898-1910) and the next isr-expiration run proposes again. The
    audit keys each side by (leader, partition epoch, proposal), so the model's two shrinks pair with the broker's two
    requests one to one (keyed by epoch alone, the second overwrote the first and a request was left alone)."""
    events = [
        *kraft_leader([1, 2, 3]),
        fetch(T + 100, 2, 10, 10),
        fetch(T + 100, 3, 10, 10),
        append(T + 200, 20),
        fetch(T + 300, 2, 20, 20),  # 2 keeps up; 3 stops fetching
        tick(T + LAG + 400, "isr-expiration", broker=1, end_ms=T + LAG + 400),  # shrink [1, 2] from epoch 0
        sent(T + LAG + 402, [1, 2], 0),
        answer(T + LAG + 440, "INELIGIBLE_REPLICA"),  # reverted
        fetch(T + LAG + 2000, 2, 20, 20),
        tick(T + LAG + 2900, "isr-expiration", broker=1, end_ms=T + LAG + 2900),  # shrink [1, 2] from epoch 0 again
        sent(T + LAG + 2902, [1, 2], 0),
        answer(T + LAG + 2940, isr=[1, 2], partition_epoch=1),
        isr_updated(T + LAG + 2945, [1, 2, 3], [1, 2], 1, "shrink", topic="t"),
    ]
    outcome = run(events, T + 60_000, **AP, isr_expiration_interval_ms=0)
    assert requests(outcome) == [(LAG + 400, [1, 2], 0, "INELIGIBLE_REPLICA"), (LAG + 2902, [1, 2], 0, None)]
    assert outcome.divergences == []


def test_a_new_leaders_proposal_is_not_refused_for_the_item_the_old_leaders_manager_holds(run: Run) -> None:
    """KRaft 4.4.0 lab, kill and restart: leader 1's shrink is answered STALE_BROKER_EPOCH and resent, then the
    controller gives the partition to broker 2, which re-adds broker 1 when it fetches again. Each broker has its
    own manager (BrokerServer@4.3.1 L291-299), so only broker 1's holds the shrink: broker 2's expand is submitted
    and sent (putIfAbsent refuses a partition's second item in one manager only, DefaultAlterPartitionManager@4.4
    L104-115). The model, with one flag per partition, refused it as OPERATION_NOT_ATTEMPTED and missed the
    request."""
    item = {"topic": "t", "partition": 0, "isr": [1, 2, 3], "leader_epoch": 1, "partition_epoch": 5}
    events = [
        lai(T, 1, [1, 2, 3], [1, 2, 3], 0, leader_leo=10, hw=10, partition_epoch=4, **KRAFT),
        tick(T + 1, broker=1, kafka_version="4.4.0", isr_protocol="alter_partition"),
        tick(T + 2, broker=2, kafka_version="4.4.0", isr_protocol="alter_partition"),
        fetch(T + 100, 2, 10, 10),
        fetch(T + 100, 3, 10, 10),
        append(T + 200, 20),
        tick(T + LAG + 300, "isr-expiration", broker=1, end_ms=T + LAG + 300),  # shrink [1] from epoch 4
        sent(T + LAG + 302, [1], 4),
        answer(T + LAG + 310, "STALE_BROKER_EPOCH"),
        sent(T + LAG + 361, [1], 4),
        answer(T + LAG + 370, "STALE_BROKER_EPOCH"),
        lai(T + LAG + 400, 2, [2, 3], [1, 2, 3], 1, leader_leo=20, hw=20, partition_epoch=5, broker=2,
            controller_epoch=-1),
        fetch(T + LAG + 500, 1, 20, 20),  # broker 1 back: leader 2 expands [1, 2, 3] from epoch 5
        {"type": "alter_partition_sent", "ts": T + LAG + 502, "broker": 2, "partitions": [item]},
        {**answer(T + LAG + 540, isr=[1, 2, 3], partition_epoch=6), "broker": 2, "leader_epoch": 1},
        {**isr_updated(T + LAG + 545, [2, 3], [1, 2, 3], 6, "expand", topic="t"), "broker": 2, "leader": 2},
    ]  # fmt: skip
    outcome = run(events, T + 60_000, **AP, isr_expiration_interval_ms=0)
    proposed = [(d["ts"] - T, d["leader"], d["kind"]) for d in outcome.decisions if d["kind"] in ("shrink", "expand")]
    assert proposed == [(LAG + 300, 1, "shrink"), (LAG + 500, 2, "expand")]
    assert [(r["broker"], r["partitions"][0]["error"]) for r in outcome.alter_partitions] == [
        (1, "STALE_BROKER_EPOCH"),
        (1, "STALE_BROKER_EPOCH"),
        (2, None),
    ]
    assert outcome.divergences == []
    assert state_of(outcome)["isr"] == [1, 2, 3]


def test_a_proposal_made_while_the_answer_is_handled_joins_the_next_request(run: Run) -> None:
    """KRaft 4.4.0 lab under load: broker 3's answer came at 1051, a fetch at 1052 proposed an expand, and the next
    request (1053) carried it with the two shrinks queued before: Kafka clears the in-flight flag only when
    handleAlterPartitionResponse returns (DefaultAlterPartitionManager@4.4 L157-172). The agent reports the next
    request, not the return: the model holds its queue after an answer until the broker's next request."""
    t1 = {"topic": "t", "partition": 1}
    events = [
        *kraft_leader([1, 2]),
        lai(T, 1, [1, 2], [1, 2, 3], 0, leader_leo=10, hw=10, **KRAFT, partition=1),
        fetch(T + 100, 3, 10, 10),  # t-0: expand [1, 2, 3], sent at once
        sent(T + 101, [1, 2, 3], 0),
        answer(T + 150, isr=[1, 2, 3], partition_epoch=1),
        fetch(T + 151, 3, 10, 10, partition=1),  # t-1: expand while the answer is handled
        {**sent(T + 153, [1, 2, 3], 0), "partitions": [
            {**t1, "isr": [1, 2, 3], "leader_epoch": 0, "partition_epoch": 0}]},
        {**answer(T + 190, isr=[1, 2, 3], partition_epoch=1), **t1},
    ]  # fmt: skip
    outcome = run(events, T + 60_000, **AP, isr_expiration_interval_ms=0)
    went = [(r["sent_ms"] - T, [i["partition"] for i in r["partitions"]]) for r in outcome.alter_partitions]
    assert went == [(100, [0]), (153, [1])]
    assert outcome.divergences == []


def test_an_answer_to_an_item_still_queued_takes_it_and_a_handling_ends_within_its_bound(run: Run) -> None:
    """KRaft 4.4.0 lab (the real demo): the model sent t-0 first and queued t-1, the broker sent t-1 alone first and
    t-0 after its answer. t-1's answer is the evidence the broker sent it: it leaves the model's queue answered
    (`answered_unsent`), instead of waiting behind t-0 for a send the broker already made: before, the model held it
    queued for ever (the demo's broker 1 showed four proposals queued to the end, and `STUCK` lines). A later
    proposal the broker does not make (nothing for it to send) goes at the handling bound (`handled_within`)."""
    t1 = {"topic": "t", "partition": 1}
    events = [
        *kraft_leader([1, 2]),
        lai(T, 1, [1, 2], [1, 2, 3], 0, leader_leo=10, hw=10, **KRAFT, partition=1),
        fetch(T + 100, 3, 10, 10),  # t-0: the model's expand goes at once
        fetch(T + 101, 3, 10, 10, partition=1),  # t-1: queued behind it in the model
        {**sent(T + 100, [1, 2, 3], 0), "partitions": [
            {**t1, "isr": [1, 2, 3], "leader_epoch": 0, "partition_epoch": 0}]},  # the broker: t-1 first
        {**answer(T + 150, isr=[1, 2, 3], partition_epoch=1), **t1},
        sent(T + 155, [1, 2, 3], 0),
        answer(T + 200, isr=[1, 2, 3], partition_epoch=1),
    ]  # fmt: skip
    outcome = run(events, T + 60_000, **AP, isr_expiration_interval_ms=0)
    went = [
        (r["sent_ms"] - T, r["response_ms"] - T, [(i["partition"], i["committed_isr"]) for i in r["partitions"]])
        for r in outcome.alter_partitions
    ]
    assert went == [(101, 150, [(1, [1, 2, 3])]), (100, 200, [(0, [1, 2, 3])])]
    assert outcome.summary["ignored_alter_partition_answers_by_reason"] == {}


def test_a_queue_held_while_an_answer_is_handled_goes_at_the_bound_when_the_broker_sends_nothing(run: Run) -> None:
    """`handled_within`: after t-0's answer the model holds t-1's proposal for the broker's next request, which never
    comes (the broker did not propose it): it goes `HANDLING_BOUND_MS` after it was submitted, not never."""
    events = [
        *kraft_leader([1, 2]),
        lai(T, 1, [1, 2], [1, 2, 3], 0, leader_leo=10, hw=10, **KRAFT, partition=1),
        fetch(T + 100, 3, 10, 10),
        sent(T + 101, [1, 2, 3], 0),
        answer(T + 150, isr=[1, 2, 3], partition_epoch=1),
        fetch(T + 151, 3, 10, 10, partition=1),  # proposed while the answer is handled: held
        {**answer(T + 5_000, isr=[1, 2, 3], partition_epoch=1), "partition": 1},
    ]
    outcome = run(events, T + 60_000, **AP, isr_expiration_interval_ms=0)
    went = [(r["sent_ms"] - T, [i["partition"] for i in r["partitions"]]) for r in outcome.alter_partitions]
    assert went == [(100, [0]), (151 + HANDLING_BOUND_MS, [1])]


def test_a_leader_judges_eligibility_on_its_own_metadata(run: Run) -> None:
    """KRaft 4.4.0 lab, restart: broker 2 restarted; brokers 2 and 3 had it unfenced 40 ms before leader 1's metadata
    did, and leader 1 expanded only after (Partition.isReplicaIsrEligible reads the leader's metadata cache,
    Partition@3.9.0-rc3 L1060-1093). The model, which took any broker's registration, expanded at the earlier
    fetch."""

    events = [
        *kraft_leader([1, 3]),
        registration(T + 10, True, epoch=405),
        registration(T + 164, False, reporter=3, epoch=405),  # another broker's metadata: not the leader's
        fetch(T + 200, 2, 10, 10, broker_epoch=405),
        registration(T + 208, False, epoch=405),
        fetch(T + 283, 2, 10, 10, broker_epoch=405),  # eligible now: expand [1, 2, 3]
    ]  # fmt: skip
    outcome = run(events, T + 60_000, **AP, isr_expiration_interval_ms=0)
    assert [(d["ts"] - T, d["isr_after"]) for d in outcome.decisions if d["kind"] == "expand"] == [(283, [1, 2, 3])]


def test_a_restarted_leader_resets_its_followers_as_a_new_leader(run: Run) -> None:
    """KRaft 4.4.0 lab, controller failover: the restarted node replays its metadata and reports makeLeader with
    Kafka's isNewLeader for a partition it led before (a new Partition: Partition@4.4 L606-607), with the same
    leader epoch; its followers, now fetching elsewhere, are reset (resetReplicaState, L652-658) and one lag later
    its isr-expiration shrinks them out. The model took the same state as a duplicate, kept its followers at the
    leader's LEO and never shrank."""
    events = [
        *kraft_leader([1, 2, 3]),
        fetch(T + 100, 2, 10, 10),
        fetch(T + 100, 3, 10, 10),  # both at the leader's LEO: never out of sync while it stays so
        lai(T + 20_000, 1, [1, 2, 3], [1, 2, 3], 0, leader_leo=10, hw=10, new_leader=True, **KRAFT),  # restarted
        tick(T + 22_000, "isr-expiration", broker=1, end_ms=T + 22_000),
        tick(T + 30_100, "isr-expiration", broker=1, end_ms=T + 30_100),  # a lag after the restart: shrink to [1]
    ]
    outcome = run(events, T + 60_000, **AP, isr_expiration_interval_ms=0)
    assert [(d["ts"] - T, d["isr_after"]) for d in outcome.decisions if d["kind"] == "shrink"] == [(30_100, [1])]


def test_an_expand_by_a_fetch_just_before_the_leader_reported_applying_its_commit_is_timing(run: Run) -> None:
    """KRaft 4.4.0 lab under load: leader 2's shrink to [2] was answered at 1199 and its `isr_updated` stamped at
    1258; follower 3 fetched at 1248, and the broker proposed [2, 3] (sent at 1434: the fetch found the partition
    committed, the stamp comes at handleAlterPartitionUpdate's exit). The model, which commits at the stamp, found
    the partition in flight at 1248 and expanded follower 1 at its next fetch: the audit's `applying` rule calls the
    differing expand timing (margin -10 ms), and the next pair, which agrees, joins the views again."""
    lead2 = {"broker": 2, "controller_epoch": -1}
    answer2 = {"type": "alter_partition_response", "topic": "t", "partition": 0, "broker": 2, "leader_epoch": 0}

    def sent2(ts: int, isr: list[int], partition_epoch: int) -> dict:
        item = {"topic": "t", "partition": 0, "isr": isr, "leader_epoch": 0, "partition_epoch": partition_epoch}
        return {"type": "alter_partition_sent", "ts": ts, "broker": 2, "partitions": [item]}

    events = [
        lai(T, 2, [1, 2, 3], [1, 2, 3], 0, leader_leo=10, hw=10, **lead2),
        tick(T + 1, broker=2, kafka_version="4.4.0", isr_protocol="alter_partition"),
        append(T + 50, 20),
        tick(T + LAG + 100, "isr-expiration", broker=2, end_ms=T + LAG + 100),  # shrink [2]
        sent2(T + LAG + 102, [2], 0),
        {**answer2, "ts": T + LAG + 199, "isr": [2], "partition_epoch": 1},
        fetch(T + LAG + 248, 3, 20, 20),  # in flight for the model; committed for the broker
        {**isr_updated(T + LAG + 258, [1, 2, 3], [2], 1, "shrink", topic="t"), "broker": 2, "leader": 2},
        sent2(T + LAG + 434, [2, 3], 1),  # the broker's expand of 3
        fetch(T + LAG + 456, 1, 20, 20),  # the model's expand of 1
        {**answer2, "ts": T + LAG + 600, "isr": [2, 3], "partition_epoch": 2},
        {**isr_updated(T + LAG + 610, [2], [2, 3], 2, "expand", topic="t"), "broker": 2, "leader": 2},
        fetch(T + LAG + 619, 1, 20, 20),
        sent2(T + LAG + 620, [1, 2, 3], 2),
        {**answer2, "ts": T + LAG + 700, "isr": [1, 2, 3], "partition_epoch": 3},
    ]  # fmt: skip
    outcome = run(events, T + 60_000, **AP, isr_expiration_interval_ms=0)
    found = [(d["kind"], d["cause"], d["margin_ms"]) for d in outcome.divergences]
    assert found == [("timing", "applying", -10)]


def test_a_restarted_leaders_first_run_before_its_metadata_replay_shrinks_nothing(run: Run) -> None:
    """KRaft 4.4.0 lab, controller failover: node 2 was killed and restarted; its new run's first isr-expiration
    (ReplicaManager.startup schedules it at once) came 25 ms before it replayed its metadata, with no Partition yet.
    The agent's `seq` starts at its start time in ms x 1000 (agent/README.md), so the first event of the new run
    shows the restart (`restarted`): what the broker led is forgotten until makeLeader creates it again
    (`forget_partition`), its manager's request in flight is gone too. The model had shrunk the ISR of every
    partition node 2 led, followers stale since the kill, a proposal node 2 never made."""
    start = T + 30_000  # the new run's agent start
    events = [
        {**lai(T, 1, [1, 2, 3], [1, 2, 3], 0, leader_leo=10, hw=10, **KRAFT), "seq": T * 1000 + 1},
        {**tick(T + 1, broker=1, kafka_version="4.4.0", isr_protocol="alter_partition"), "seq": T * 1000 + 2},
        {**fetch(T + 100, 2, 5, 10), "broker": 1, "seq": T * 1000 + 3},  # followers behind: out of sync a lag later
        {**fetch(T + 100, 3, 5, 10), "broker": 1, "seq": T * 1000 + 4},
        # killed; the new run's first isr-expiration, before its metadata replay
        {**tick(start + 500, "isr-expiration", broker=1, end_ms=start + 500), "seq": start * 1000 + 1},
        {**lai(start + 525, 1, [1, 2, 3], [1, 2, 3], 0, leader_leo=10, hw=10, new_leader=True, **KRAFT),
         "seq": start * 1000 + 2},
        {**tick(start + LAG + 600, "isr-expiration", broker=1, end_ms=start + LAG + 600), "seq": start * 1000 + 3},
    ]  # fmt: skip
    outcome = run(events, T + 60_000, **AP, isr_expiration_interval_ms=0)
    assert [(d["ts"] - T, d["isr_after"]) for d in outcome.decisions if d["kind"] == "shrink"] == [
        (30_000 + LAG + 600, [1])
    ]


def test_a_broker_the_controller_removed_is_not_eligible_before_the_leader_reports_its_fencing(run: Run) -> None:
    """KRaft 4.4.0 lab, controller failover: the controller fenced broker 2 and removed it from the ISR in one
    metadata batch; leader 1's cache had the fencing before it applied the partition change (BrokerMetadataPublisher
    L130, then L148), but the agent reports the registration when onMetadataUpdate returns, after the partition's
    `leader_and_isr`. A fetch of broker 2 in between re-added it in the model only (`removed_by_controller`)."""

    events = [
        registration(T, False),
        *kraft_leader([1, 2, 3]),
        lai(T + 8_587, 1, [1, 3], [1, 2, 3], 0, leader_leo=10, hw=10, partition_epoch=1, **KRAFT),  # 2 fenced
        fetch(T + 8_594, 2, 10, 10),  # caught up, but fenced in leader 1's metadata already
        registration(T + 8_610, True),  # the same delta's registration, as reported
        registration(T + 9_000, False),  # unfenced again
        fetch(T + 9_050, 2, 10, 10),  # expand [1, 2, 3]
    ]  # fmt: skip
    outcome = run(events, T + 60_000, **AP, isr_expiration_interval_ms=0)
    assert [(d["ts"] - T, d["isr_after"]) for d in outcome.decisions if d["kind"] == "expand"] == [(9_050, [1, 2, 3])]


def test_a_fetch_with_a_stale_broker_epoch_changes_nothing(run: Run) -> None:
    """PartitionTest.testFenceFollowerFetchWithStaleBrokerEpoch (3.9.0-rc3): Replica.updateFetchStateOrThrow refuses a
    fetch whose broker epoch is older than the leader's metadata has for the live follower (Replica.scala L116-123).
    The model applied it: the HW moved from 0 to 10 and the follower's caught-up time with it. A fenced registration
    has no alive epoch (getAliveBrokerEpoch), so its fetch is not refused by this rule."""
    events = [
        lai(T, 1, [1, 2], [1, 2], 0, leader_leo=10, hw=0, **KRAFT),
        tick(T + 1, broker=1, kafka_version="3.9.2", isr_protocol="alter_partition"),
        registration(T + 2, False, epoch=12),
        fetch(T + 100, 2, 10, 10, broker_epoch=11),  # the follower's previous incarnation: refused
    ]
    stale = run(events, T + 1_000, **AGENT_AP)
    assert stale.summary["ignored_fetches_by_reason"] == {"stale_broker_epoch": 1}
    assert (state_of(stale)["hw"], follower(state_of(stale), 2)["last_caught_up_ms"]) == (0, T)
    current = run([*events[:3], fetch(T + 100, 2, 10, 10, broker_epoch=12)], T + 1_000, **AGENT_AP)
    assert (state_of(current)["hw"], follower(state_of(current), 2)["last_caught_up_ms"]) == (10, T + 100)
    fenced = run([*events[:2], registration(T + 2, True, epoch=12), events[3]], T + 1_000, **AGENT_AP)
    assert state_of(fenced)["hw"] == 10


def test_a_broker_fenced_in_cluster_wide_registrations_stays_ineligible_after_the_controller_removes_another(
    run: Run,
) -> None:
    """Registrations without `broker` (a cluster-wide source) serve every leader. The controller's removal of
    follower 2 marks it fenced in leader 1's metadata (`removed_by_controller`); that mark made a leader-own map, after
    which leader 1 no longer read the cluster-wide registrations: broker 3, fenced there, was refused once, then
    proposed for an expand. Kafka refuses it both times (Partition.isReplicaIsrEligible, Partition@3.9.0-rc3
    L1060-1093); 2 is eligible again once the source reports it unfenced."""

    def cluster_wide(ts: int, broker: int, fenced: bool) -> dict:
        body = {"id": broker, "epoch": 7, "fenced": fenced, "in_controlled_shutdown": False}
        return {"type": "broker_registration", "ts": ts, **body}

    events = [
        cluster_wide(T - 2, 2, False),
        cluster_wide(T - 1, 3, True),
        lai(T, 1, [1, 2], [1, 2, 3], 0, leader_leo=10, hw=10, **KRAFT),
        tick(T + 1, broker=1, kafka_version="4.4.0", isr_protocol="alter_partition"),
        fetch(T + 100, 3, 10, 10),  # caught up, fenced: refused
        lai(T + 1_000, 1, [1], [1, 2, 3], 0, leader_leo=10, hw=10, partition_epoch=1, **KRAFT),  # 2 removed
        fetch(T + 1_100, 3, 10, 10),  # still fenced: refused again
        fetch(T + 1_200, 2, 10, 10),  # fenced in leader 1's metadata until the source reports it
        cluster_wide(T + 1_300, 2, False),
        fetch(T + 1_400, 2, 10, 10),  # expand [1, 2]
    ]  # fmt: skip
    outcome = run(events, T + 60_000, **AP, isr_expiration_interval_ms=0)
    assert [(d["ts"] - T, d["isr_after"]) for d in outcome.decisions if d["kind"] == "expand"] == [(1_400, [1, 2])]


def test_a_proposal_of_every_replica_from_an_older_epoch_is_an_expand() -> None:
    """KRaft 4.4.0 lab: leader 1's expand to [1, 2, 3] from epoch 1 committed by the metadata (epoch 2), then the
    broker sent [1, 2, 3] from epoch 1 again (answered INVALID_UPDATE_VERSION), as the model did. Judged against the
    model's ISR at epoch 2, [1, 2, 3], it looked like a shrink and the pair a `different_isr`; a proposal of every
    replica can only add one (`observe_alter_partition_sent`)."""
    from isrwatch.state.events import AlterPartitionSent, ProposedPartition
    from isrwatch.state.partition import Outputs, Partition, observe_alter_partition_sent

    p = Partition("default", "t", 0, leader=1, leader_epoch=0, partition_epoch=2, replicas=(1, 2, 3), isr=(1, 2, 3))
    item = ProposedPartition(topic="t", partition=0, isr=[1, 2, 3], leader_epoch=0, partition_epoch=1)
    out = Outputs()
    observe_alter_partition_sent({p.key: p}, AlterPartitionSent(ts=T, broker=1, partitions=[item]), out)
    (observed,) = [o for o in out.observed if not isinstance(o, AlterPartitionSent)]
    assert (observed.event.kind, observed.event.partition_epoch) == ("expand", 2)


def test_a_proposal_from_the_epoch_before_the_models_is_judged_against_that_epochs_isr() -> None:
    """KRaft 4.4.0 lab (session 27): leader 3's expand of payments-0 to [1, 3] from epoch 3 was committed by the
    metadata as epoch 4, then the broker proposed [1, 3] from epoch 3 again (refused INVALID_UPDATE_VERSION), as the
    model did. Against the model's [1, 3] at epoch 4 it looked like a shrink (`different_isr`); the model keeps the
    ISR the current epoch replaced (`commit_isr`, `based_on_isr`), so it is the expand from [3] it was."""
    from isrwatch.state.events import AlterPartitionSent, ProposedPartition
    from isrwatch.state.partition import Outputs, Partition, commit_isr, observe_alter_partition_sent

    p = Partition("default", "payments", 0, leader=3, leader_epoch=0, partition_epoch=3, replicas=(3, 1, 2), isr=(3,))
    commit_isr(p, (1, 3), 4)
    item = ProposedPartition(topic="payments", partition=0, isr=[1, 3], leader_epoch=0, partition_epoch=3)
    out = Outputs()
    observe_alter_partition_sent({p.key: p}, AlterPartitionSent(ts=T, broker=3, partitions=[item]), out)
    (observed,) = [o for o in out.observed if not isinstance(o, AlterPartitionSent)]
    assert (observed.event.kind, observed.event.isr_before, observed.event.partition_epoch) == ("expand", [3], 4)
    # Two epochs on, the model no longer knows that ISR: judged against the current one, as before.
    commit_isr(p, (1, 2, 3), 5)
    out = Outputs()
    observe_alter_partition_sent({p.key: p}, AlterPartitionSent(ts=T, broker=3, partitions=[item]), out)
    (observed,) = [o for o in out.observed if not isinstance(o, AlterPartitionSent)]
    assert (observed.event.kind, observed.event.isr_before) == ("shrink", None)


@pytest.mark.parametrize("held_ms", [16_000, 45_000])
def test_a_proposal_held_behind_a_request_in_flight_pairs_with_the_brokers_next_request(run: Run, held_ms: int) -> None:
    """KRaft 4.4.0 lab, controller failover: a leader decided five shrinks while its request was in flight to the
    controller that had gone, and sent them 16 s later, when that request was answered (the manager retries it until
    answered: DefaultAlterPartitionManager@4.4 L104-142). The model's proposal waits for the broker's first request
    after it (`settles_at`) rather than the audit window (10 s here), so the two are one act; a request later than
    SEND_HELD_MS (30 s) and the window is not that decision's send."""
    t1 = {"topic": "t", "partition": 1}
    events = [
        *kraft_leader([1, 2, 3]),
        lai(T, 1, [1, 2], [1, 2, 3], 0, leader_leo=10, hw=10, **KRAFT, partition=1),
        fetch(T + 100, 2, 10, 10),
        fetch(T + 100, 3, 10, 10),
        fetch(T + 100, 3, 10, 10, partition=1),  # t-1: expand [1, 2, 3]; its request is answered only much later
        {**sent(T + 101, [1, 2, 3], 0), "partitions": [{**t1, "isr": [1, 2, 3], "leader_epoch": 0,
                                                         "partition_epoch": 0}]},
        append(T + 200, 20),
        fetch(T + 300, 2, 20, 20),  # 2 keeps up; 3 stops fetching t-0
        tick(T + LAG + 400, "isr-expiration", broker=1, end_ms=T + LAG + 400),  # shrink t-0 to [1, 2]: queued
        {**answer(T + LAG + held_ms, isr=[1, 2, 3], partition_epoch=1), **t1},
        sent(T + LAG + held_ms + 2, [1, 2], 0),
        answer(T + LAG + held_ms + 40, isr=[1, 2], partition_epoch=1),
        isr_updated(T + LAG + held_ms + 45, [1, 2, 3], [1, 2], 1, "shrink", topic="t"),
    ]  # fmt: skip
    outcome = run(events, T + 120_000, **AP, isr_expiration_interval_ms=0)
    went = [(r["sent_ms"] - T, [i["partition"] for i in r["partitions"]]) for r in outcome.alter_partitions]
    assert went == [(100, [1]), (LAG + held_ms + 2, [0])]
    found = sorted((d["kind"], d["ts"] - T) for d in outcome.divergences)
    if held_ms < SEND_HELD_MS:
        assert found == []
    else:
        assert found == [("missed_by_model", LAG + held_ms + 2), ("unexplained_by_model", LAG + 400)]


@pytest.mark.parametrize(("gap_ms", "kind"), [(2, "timing"), (150, "different_isr")])
def test_two_followers_fetching_within_ms_may_be_taken_back_in_either_order(run: Run, gap_ms: int, kind: str) -> None:
    """KRaft 4.4.0 lab (s28 run 2): followers 1 and 3 of payments-2 fetched on two handler threads; 3's fetch was
    stamped 2 ms earlier but applied later (the agent's `seq` has 1's first), so the leader proposed [1, 2] where the
    model, which orders by the stamps, proposed [2, 3]. Within `audit_timing_ms` that is `fetch_order` timing; further
    apart it counts."""
    events = [
        *kraft_leader([1]),
        fetch(T + 1000 + gap_ms, 2, 10, 10),  # applied first: its seq is the lower
        fetch(T + 1000, 3, 10, 10),
        sent(T + 1000 + gap_ms + 5, [1, 2], 0),
        answer(T + 1000 + gap_ms + 40, isr=[1, 2], partition_epoch=1),
        isr_updated(T + 1000 + gap_ms + 45, [1], [1, 2], 1, "expand", topic="t"),
    ]
    outcome = run(events, T + 60_000, **AP, isr_expiration_interval_ms=0)
    found = [(d["kind"], d["cause"], d["margin_ms"]) for d in outcome.divergences]
    assert found == [(kind, "fetch_order", gap_ms) if kind == "timing" else (kind, None, None)]


def test_a_proposal_the_brokers_request_did_not_carry_yet_waits_for_the_next_request(run: Run) -> None:
    """KRaft 4.4.0 lab (s28 run 2): broker 3's answer was handled, then a follower's fetch reported in the same ms as
    the next request made an expand that the request did not carry: the manager copied its queue before the submit
    (DefaultAlterPartitionManager@4.4 L121). The model, which saw the fetch first, holds the proposal for the next
    request (`not_carried_yet`) instead of sending it with the items the broker's request did carry."""

    def item(partition: int) -> dict:
        return {"topic": "t", "partition": partition, "isr": [1, 2, 3], "leader_epoch": 0, "partition_epoch": 0}

    events = [
        *kraft_leader([1, 2]),
        *(lai(T, 1, [1, 2], [1, 2, 3], 0, leader_leo=10, hw=10, **KRAFT, partition=p) for p in (1, 2)),
        fetch(T + 100, 3, 10, 10),  # t-0: expand, sent at once
        sent(T + 101, [1, 2, 3], 0),
        fetch(T + 120, 3, 10, 10, partition=2),  # t-2: expand, queued behind t-0's request
        answer(T + 150, isr=[1, 2, 3], partition_epoch=1),
        fetch(T + 152, 3, 10, 10, partition=1),  # t-1: expand, reported just before the request that lacks it
        {"type": "alter_partition_sent", "ts": T + 152, "broker": 1, "partitions": [item(2)]},
        {**answer(T + 190, isr=[1, 2, 3], partition_epoch=1), "partition": 2},
        {"type": "alter_partition_sent", "ts": T + 191, "broker": 1, "partitions": [item(1)]},
        {**answer(T + 230, isr=[1, 2, 3], partition_epoch=1), "partition": 1},
    ]  # fmt: skip
    outcome = run(events, T + 60_000, **AP, isr_expiration_interval_ms=0)
    went = [(r["sent_ms"] - T, [i["partition"] for i in r["partitions"]]) for r in outcome.alter_partitions]
    assert went == [(100, [0]), (152, [2]), (191, [1])]
    assert outcome.divergences == []


@pytest.mark.parametrize("stamped_where_applied", [True, False])
def test_a_fetch_applied_after_the_metadata_it_was_clocked_before_comes_after_it(
    run: Run, stamped_where_applied: bool
) -> None:
    """KRaft 4.4.0 lab (session 26, base12): follower 3's fetch read Kafka's clock (fetchTimeMs) 3 ms before the
    leader applied the metadata that committed [1, 3], and took effect after it (updateFollowerFetchState waits for
    makeLeader's write lock; the agent's `seq` has it after). Stamped with fetchTimeMs, the model applied it first and
    proposed [1, 3] from the old epoch, which the leader never did. The agent stamps a fetch where it took effect and
    carries fetchTimeMs as `fetch_ms`: the follower's lastCaughtUpTimeMs is that clock, the order the stamp's."""
    clocked = T + 97
    stamp = {"ts": T + 101, "fetch_ms": clocked} if stamped_where_applied else {"ts": clocked}
    events = [
        lai(T, 1, [1], [1, 2, 3], 0, leader_leo=10, hw=10, partition_epoch=1, **KRAFT),
        tick(T + 1, broker=1, kafka_version="4.4.0", isr_protocol="alter_partition"),
        lai(T + 100, 1, [1, 3], [1, 2, 3], 0, leader_leo=10, hw=10, partition_epoch=2, **KRAFT),
        {**fetch(0, 3, 10, 10), **stamp},
    ]
    outcome = run(events, T + 60_000, **AP, isr_expiration_interval_ms=0)
    proposed = [(d["ts"] - T, d["kind"], d["isr_after"]) for d in outcome.decisions if d["kind"] == "expand"]
    assert proposed == ([] if stamped_where_applied else [(97, "expand", [1, 3])])
    assert follower(state_of(outcome), 3)["last_caught_up_ms"] == clocked


def test_a_leader_proposing_again_what_its_ignored_answer_committed_is_timing(run: Run) -> None:
    """KRaft 4.4.0 lab (s28 run 7): the leader proposed [1, 2] from epoch 0, the metadata then reset the partition to
    that epoch, so the callback ignored the answer that committed [1, 2] and the next fetch proposed [1, 2] from
    epoch 0 again (refused INVALID_UPDATE_VERSION). The model, whose proposal came after that metadata, had its answer
    applied and proposed once: the second request is `reproposed` timing, not missed_by_model."""
    events = [
        *kraft_leader([1]),
        lai(T + 90, 1, [1], [1, 2, 3], 0, leader_leo=10, hw=10, **KRAFT),  # the metadata of epoch 0 again
        fetch(T + 100, 2, 10, 10),  # the model proposes here, after the metadata
        sent(T + 101, [1, 2], 0),  # the leader's proposal, made before the metadata (a fetch racing a commit)
        answer(T + 140, isr=[1, 2], partition_epoch=1),
        sent(T + 190, [1, 2], 0),  # its answer ignored, the leader proposes again
        answer(T + 230, "INVALID_UPDATE_VERSION"),
        lai(T + 240, 1, [1, 2], [1, 2, 3], 0, leader_leo=10, hw=10, partition_epoch=1, **KRAFT),
    ]
    outcome = run(events, T + 60_000, **AP, isr_expiration_interval_ms=0)
    found = [(d["kind"], d["cause"], d["margin_ms"], d["observed"]["ts"] - T) for d in outcome.divergences]
    assert found == [("timing", "reproposed", 89, 190)]
