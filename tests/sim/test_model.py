"""The simulator judged by the real engine: each fault scenario, replayed through `isrwatch.state.replay`, must give
the decisions Kafka would make for the reasons Kafka would give — and the events must look like Kafka's."""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass

import msgspec
import pytest

from isrwatch.sim.config import DEFAULT_TOPICS, SimConfig, TopicSpec
from isrwatch.sim.faults import Fault, parse_duration, parse_fault
from isrwatch.sim.model import assign_replicas, simulate, with_scenario
from isrwatch.state.config import Config, ConfigError
from isrwatch.state.replay import replay
from tests.support.state import Outcome

LAG = 10_000
INTERVAL = LAG // 2
LINGER = 5000
CHECK = 2500
KAFKA = Config(replica_lag_time_max_ms=LAG)
# KRaft-era leaders: they propose each ISR change to the controller (AlterPartition, SPEC §4.9).
KRAFT = Config(replica_lag_time_max_ms=LAG, kafka_version="3.9", isr_protocol="alter_partition")
LATENCY = 20  # SimConfig.alter_partition_latency_ms's default


@dataclass
class Run:
    config: SimConfig
    faults: list[Fault]
    events: list[dict]
    result: Outcome

    def fault(self, kind: str) -> Fault:
        return next(f for f in self.faults if f.kind == kind)

    def decisions(self, kind: str) -> list[dict]:
        return [d for d in self.result.decisions if d["kind"] == kind]

    @property
    def assignment(self) -> dict[tuple[str, int], dict]:
        """Each partition's startup LeaderAndIsr: replicas, preferred leader."""
        return {
            (e["topic"], e["partition"]): e
            for e in self.events
            if e["type"] == "leader_and_isr" and e["ts"] == self.config.start_ms
        }

    def following(self, broker: int) -> set[tuple[str, int]]:
        return {k for k, e in self.assignment.items() if broker in e["replicas"] and e["leader"] != broker}

    def batch_of(self, decision: dict) -> dict:
        """The leader's propagation batch that carried this ISR change."""
        part = {"topic": decision["topic"], "partition": decision["partition"]}
        return next(
            p
            for p in self.result.propagations
            if p["broker"] == decision["leader"] and part in p["partitions"] and p["ts"] > decision["ts"]
        )


def run(
    scenario: str | None = None, faults: tuple[Fault, ...] = (), seed: int = 3, kafka: Config = KAFKA, **shape
) -> Run:
    """Simulate, encode as JSONL (the wire form) and replay through the engine with the brokers' settings."""
    config = SimConfig(kafka=kafka, **shape)
    chosen = list(faults)
    if scenario:
        config, chosen = with_scenario(config, scenario)
    events = list(simulate(config, chosen, seed))
    result = Outcome.of(replay([[msgspec.json.encode(e) for e in events]], config.kafka))
    assert result.dead_letters == []
    assert result.summary["ignored_fetches_by_reason"] == {}
    assert not result.summary.get("ignored_alter_partition_responses_by_reason")  # every answer met its proposal
    assert not result.summary.get("ignored_alter_partition_answers_by_reason")
    return Run(config, chosen, events, result)


scenario = functools.cache(lambda name: run(name))


def test_healthy_cluster_looks_like_kafka():
    r = run(duration_ms=30_000)
    events = r.events
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert all(a["ts"] <= b["ts"] for a, b in zip(events, events[1:], strict=False))
    kinds = Counter(e["type"] for e in events)
    partitions = sum(t.partitions for t in DEFAULT_TOPICS)
    assert kinds["leader_and_isr"] == partitions
    # Preferred leaders spread over every broker; RF as configured; every replica starts in sync.
    startup = r.assignment
    assert {e["leader"] for e in startup.values()} == {1, 2, 3, 4}
    for t in DEFAULT_TOPICS:
        for p in range(t.partitions):
            e = startup[(t.name, p)]
            assert len(e["replicas"]) == t.replication_factor and e["leader"] == e["replicas"][0]
            assert e["isr"] == sorted(e["replicas"])
    # Producers append to leaders (LEO only grows); followers fetch from their leader's LEO, never past it,
    # and an idle follower still fetches about every replica.fetch.wait.max.ms.
    leo: dict[tuple[str, int], int] = {}
    last_fetch: dict[tuple[str, int, int], int] = {}
    for e in events:
        key = (e.get("topic"), e.get("partition"))
        if e["type"] == "append":
            assert e["leader_leo"] > leo[key]
            leo[key] = e["leader_leo"]
        elif e["type"] == "leader_and_isr":
            leo[key] = e["leader_leo"]
        else:
            assert e["leader_leo"] == leo[key] and 0 <= e["fetch_offset"] <= e["leader_leo"]
            assert e["replica"] in startup[key]["replicas"] and e["replica"] != startup[key]["leader"]
            assert e["current_leader_epoch"] == 0
            follower = (*key, e["replica"])
            if follower in last_fetch:
                assert e["ts"] - last_fetch[follower] <= 500 + 2 * 11  # the wait plus at most two round trips
            last_fetch[follower] = e["ts"]
    assert len(last_fetch) == sum(t.partitions * (t.replication_factor - 1) for t in DEFAULT_TOPICS)
    assert kinds["append"] > 30 * partitions  # ~5 producer batches per partition-second
    caught_up = sum(e["type"] == "fetch" and e["fetch_offset"] == e["leader_leo"] for e in events)
    assert caught_up > kinds["fetch"] / 2  # healthy followers mostly ask for the leader's LEO itself
    # The engine agrees nothing happened: no ISR change, every follower in sync and close behind.
    assert Counter(d["kind"] for d in r.result.decisions) == {"leader_and_isr": partitions}
    for state in r.result.states:
        assert state["isr"] == sorted(state["replicas"]) and not state["under_replicated"]
        assert all(f["in_sync"] and f["lag_offsets"] < 500 for f in state["followers"])


def test_same_seed_same_events_other_seed_other_events():
    config = SimConfig(kafka=KAFKA, duration_ms=5000)
    stall = [parse_fault("stall:broker=2:start=1s")]
    assert list(simulate(config, stall, 7)) == list(simulate(config, stall, 7))
    assert list(simulate(config, stall, 7)) != list(simulate(config, stall, 8))


def test_assignment_spreads_preferred_leaders_and_replicas_like_kafka():
    import random

    replicas = assign_replicas([1, 2, 3, 4], 8, 3, random.Random(1))
    assert all(len(set(r)) == 3 for r in replicas)
    assert Counter(r[0] for r in replicas) == {1: 2, 2: 2, 3: 2, 4: 2}
    assert Counter(b for r in replicas for b in r) == {1: 6, 2: 6, 3: 6, 4: 6}


def _window_fetches(r: Run, broker: int, start: int, end: int) -> list[dict]:
    return [e for e in r.events if e["type"] == "fetch" and e["replica"] == broker and start <= e["ts"] < end]


def _assert_propagated_after_linger(r: Run, decision: dict) -> None:
    batch = r.batch_of(decision)
    assert batch["trigger"] == "linger"
    assert LINGER < batch["ts"] - decision["ts"] <= LINGER + CHECK


def test_stall_shrinks_stuck_followers_then_recovery_expands():
    r = scenario("stall")
    stall = r.fault("stall")
    start, end = r.config.start_ms + stall.start_ms, r.config.start_ms + stall.end_ms
    following = r.following(2)
    assert following and _window_fetches(r, 2, start, end) == []
    shrinks = r.decisions("shrink")
    assert {(d["topic"], d["partition"]) for d in shrinks} == following
    for d in shrinks:
        assert d["replicas_changed"] == [2] and d["reasons"] == {"2": "stuck"}
        # lastCaughtUpTimeMs is the last fetch before the stall; removal is due one lag later, at a check.
        assert start + LAG - 600 < d["ts"] <= start + LAG + INTERVAL and d["ts"] % INTERVAL == 0
        _assert_propagated_after_linger(r, d)
    expands = r.decisions("expand")
    assert {(d["topic"], d["partition"]) for d in expands} == following
    for d in expands:
        assert d["replicas_changed"] == [2] and end < d["ts"] < end + 1000  # two fetches: catch up, then at LEO
        _assert_propagated_after_linger(r, d)
    assert all(s["isr"] == sorted(s["replicas"]) for s in r.result.states)


def test_slow_broker_shrinks_for_slow_not_stuck_then_catches_up():
    r = scenario("slow")
    slow = r.fault("slow")
    start, end = r.config.start_ms + slow.start_ms, r.config.start_ms + slow.end_ms
    fetches = _window_fetches(r, 2, start + 2000, end)
    # It keeps fetching, but every fetch is behind the leader: it never catches up.
    assert len(fetches) > len(r.following(2)) * (end - start - 2000) / slow.rtt_ms * 0.9
    assert all(e["fetch_offset"] < e["leader_leo"] for e in fetches)
    shrinks = r.decisions("shrink")
    assert {(d["topic"], d["partition"]) for d in shrinks} == r.following(2)
    assert all(d["reasons"] == {"2": "slow"} and d["ts"] <= start + LAG + INTERVAL for d in shrinks)
    expands = r.decisions("expand")
    assert {(d["topic"], d["partition"]) for d in expands} == r.following(2)
    assert all(end < d["ts"] < end + 2 * slow.rtt_ms for d in expands)


def test_crash_moves_leadership_bumps_epochs_and_shrinks_isr_then_restart_expands():
    r = scenario("crash")
    crash = r.fault("crash")
    start, restart = r.config.start_ms + crash.start_ms, r.config.start_ms + crash.end_ms
    detected = start + r.config.zookeeper_session_timeout_ms
    led = {k for k, e in r.assignment.items() if e["leader"] == 1}
    hosted = {k for k, e in r.assignment.items() if 1 in e["replicas"]}
    assert led and hosted > led
    # While it is down nothing comes from it: no fetches, no appends to what it led until a new leader is in.
    assert _window_fetches(r, 1, start, restart) == []
    assert not [
        e
        for e in r.events
        if e["type"] == "append" and start <= e["ts"] < detected and (e["topic"], e["partition"]) in led
    ]
    moves = [e for e in r.events if e["type"] == "leader_and_isr" and e["ts"] == detected]
    assert {(e["topic"], e["partition"]) for e in moves} == hosted
    for e in moves:
        before = r.assignment[(e["topic"], e["partition"])]
        # Broker 1 was also the controller: broker 2 takes over with the next controller epoch.
        assert (e["controller_id"], e["controller_epoch"]) == (2, 2)
        assert e["leader_epoch"] == 1 and e["partition_epoch"] == 1
        assert 1 not in e["isr"] and e["isr"] == sorted(set(before["isr"]) - {1})
        if (e["topic"], e["partition"]) in led:
            assert e["leader"] in before["isr"] and e["leader"] != 1 and e["leader_leo"] > 0
        else:
            assert e["leader"] == before["leader"]
    lai = [d for d in r.decisions("leader_and_isr") if d["ts"] == detected]
    assert len(lai) == len(hosted) and not r.decisions("rejected")
    # The controller removed it before the leaders' lag ran out: no leader shrank anyone.
    assert not r.decisions("shrink")
    expands = r.decisions("expand")
    assert {(d["topic"], d["partition"]) for d in expands} == hosted
    assert all(d["replicas_changed"] == [1] and restart < d["ts"] < restart + 1500 for d in expands)
    # The preferred leader election gives every partition its preferred leader back.
    elect_at = r.config.start_ms + r.fault("elect").start_ms
    back = [d for d in r.decisions("leader_and_isr") if d["ts"] == elect_at]
    assert {(d["topic"], d["partition"]) for d in back} == led
    assert all(d["leader"] == 1 and d["leader_epoch"] == 2 for d in back)
    for s in r.result.states:
        assert s["leader"] == s["replicas"][0] and s["isr"] == sorted(s["replicas"])


def test_losing_the_last_in_sync_replica_takes_the_partition_offline_until_it_returns():
    r = run(
        faults=(parse_fault("crash:broker=2:start=5s:end=40s"), parse_fault("crash:broker=1:start=15s:end=30s")),
        brokers=2,
        topics=(TopicSpec("t", 1, 2),),
        duration_ms=45_000,
        seed=1,
    )
    assert r.assignment[("t", 0)]["replicas"] == [1, 2]
    lai = [(d["ts"] - r.config.start_ms, d["leader"], d["isr_after"]) for d in r.decisions("leader_and_isr")]
    assert lai == [
        (0, 1, [1, 2]),
        (11_000, 1, [1]),  # follower 2 gone: the controller drops it from the ISR
        (21_000, -1, [1]),  # leader 1 gone with no live ISR member: offline, no unclean election
        (30_000, 1, [1]),
    ]  # 1 back: the last ISR member leads again
    assert [e for e in r.events if e["type"] == "append" and 15_000 <= e["ts"] - r.config.start_ms < 30_000] == []
    assert [(d["ts"] - r.config.start_ms) // 1000 for d in r.decisions("expand")] == [40]
    assert r.result.states[0]["isr"] == [1, 2] and not r.result.states[0]["offline"]


def test_controller_failover_rejects_the_resend_and_the_old_controllers_requests():
    r = scenario("failover")
    failover = r.fault("failover")
    at = r.config.start_ms + failover.start_ms
    partitions = len(r.assignment)
    rejected = r.decisions("rejected")
    assert len(rejected) == partitions + failover.stale
    assert all(d["error"] == "STALE_CONTROLLER_EPOCH" for d in rejected)
    resent = [e for e in r.events if e["type"] == "leader_and_isr" and e["ts"] == at]
    assert len(resent) == partitions and all(e["controller_epoch"] == 2 and e["leader_epoch"] == 0 for e in resent)
    zombies = [e for e in r.events if e["type"] == "leader_and_isr" and e["ts"] > at]
    assert len(zombies) == failover.stale
    assert all(e["controller_epoch"] == 1 and e["controller_id"] == 1 and e["leader_epoch"] == 1 for e in zombies)
    # Nothing changed hands: the new epoch is known, every leader and epoch is the startup one.
    for s in r.result.states:
        start = r.assignment[(s["topic"], s["partition"])]
        assert (s["controller_epoch"], s["leader"], s["leader_epoch"]) == (2, start["leader"], 0)


def test_burst_of_isr_changes_is_throttled_into_batches():
    r = scenario("burst")
    burst = r.fault("burst")
    changes = r.decisions("shrink") + r.decisions("expand")
    assert all(d["replicas_changed"] == [2] for d in changes)
    assert all(d["reasons"] == {"2": "stuck"} for d in r.decisions("shrink"))
    flapped = Counter((d["topic"], d["partition"]) for d in r.decisions("shrink"))
    assert set(flapped) == r.following(2) and min(flapped.values()) >= 2
    batches = [p for p in r.result.propagations if p["ts"] > r.config.start_ms + burst.start_ms]
    assert len(batches) < len(changes) / 5
    assert max(len(p["partitions"]) for p in batches) >= 8
    # A steady stream never leaves 5 s of quiet: the leader is forced out by the max delay instead.
    forced = [p for p in batches if p["trigger"] == "max_delay"]
    assert forced and all(p["ts"] - p["first_change_ts"] > LINGER + CHECK for p in forced)


def test_demo_story_plays_stall_slow_crash_election_and_failover_in_order():
    r = scenario("story")
    t0 = r.config.start_ms
    stall, slow, crash, elect, failover = r.faults
    shrinks = r.decisions("shrink")
    assert {d["reasons"][str(d["replicas_changed"][0])] for d in shrinks if d["ts"] < t0 + slow.start_ms} == {"stuck"}
    assert {d["reasons"][str(d["replicas_changed"][0])] for d in shrinks if d["ts"] > t0 + slow.start_ms} == {"slow"}
    first = min(shrinks, key=lambda d: d["ts"])
    assert t0 + stall.start_ms + LAG - 600 < first["ts"] <= t0 + stall.start_ms + LAG + INTERVAL
    _assert_propagated_after_linger(r, first)
    assert min(d["ts"] for d in r.decisions("expand")) > t0 + stall.end_ms
    moved = [d for d in r.decisions("leader_and_isr") if d["ts"] > t0]
    assert {d["ts"] - t0 for d in moved} == {crash.start_ms + r.config.zookeeper_session_timeout_ms, elect.start_ms}
    assert {d["ts"] - t0 for d in r.decisions("rejected")} >= {failover.start_ms}


@pytest.mark.parametrize(
    "text, expected",
    [
        ("stall:broker=2:start=30s:end=90s", Fault("stall", 30_000, 90_000, broker=2)),
        ("slow:broker=3:start=1.5m:share=0.25:rtt=800ms", Fault("slow", 90_000, broker=3, share=0.25, rtt_ms=800)),
        ("crash:broker=1:start=10", Fault("crash", 10_000, broker=1)),
        ("failover:start=20s:to=3:stale=5", Fault("failover", 20_000, to=3, stale=5)),
        ("burst:broker=2:start=0s:end=2m:resume=3s", Fault("burst", 0, 120_000, broker=2, resume_ms=3000)),
        ("elect:start=500ms", Fault("elect", 500)),
        ("stuck-controller:broker=1:start=5s:end=40s", Fault("stuck-controller", 5000, 40_000, broker=1)),
        ("fence:broker=2:start=30s:end=50s:notice=2s", Fault("fence", 30_000, 50_000, broker=2, notice_ms=2000)),
    ],
)
def test_fault_language(text, expected):
    assert parse_fault(text, brokers=4) == expected
    assert parse_fault(str(expected), brokers=4) == expected


@pytest.mark.parametrize(
    "text, message",
    [
        ("nap:broker=1:start=1s", "fault kind 'nap'"),
        ("stall:start=1s", "stall: missing broker="),
        ("stall:broker=1:start=1s:share=0.5", "stall: unknown key 'share'"),
        ("stall:broker=9:start=1s", "brokers are 1..4"),
        ("stall:broker=1:start=10s:end=5s", "end must be after start"),
        ("stall:broker=1:start=soon", "expected a time like 30s"),
        ("slow:broker=1:start=1s:share=1.5", "between 0 and 1"),
        ("burst:broker=1:start=1s", "burst: missing end="),
        ("stall:broker=1:start", "expected KEY=VALUE"),
        ("fence:broker=1:start=1s:notice=soon", "fence notice: expected a time"),
    ],
)
def test_fault_language_errors_name_the_problem(text, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("(", r"\(")):
        parse_fault(text, brokers=4)


def test_durations():
    assert [parse_duration(v) for v in ("250ms", "2s", "1.5m", "1h", 3, "7")] == [
        250,
        2000,
        90_000,
        3_600_000,
        3000,
        7000,
    ]


@pytest.mark.parametrize(
    "shape, message",
    [
        ({"topics": (TopicSpec("t", 1, 5),)}, "replication factor must be 1..4"),
        ({"topics": (TopicSpec("bad topic", 1, 2),)}, "1-249 characters"),
        ({"brokers": 0}, "brokers: must be >= 1"),
    ],
)
def test_cluster_shape_errors(shape, message):
    with pytest.raises(ConfigError, match=message):
        SimConfig(**shape)


def _requests(r: Run, broker: int | None = None) -> list[dict]:
    return [a for a in r.result.alter_partitions if broker is None or a["broker"] == broker]


def _led_and_followed(r: Run, follower: int) -> dict[int, set[tuple[str, int]]]:
    """The partitions `follower` follows, by their (startup) leader."""
    out: dict[int, set[tuple[str, int]]] = {}
    for k, e in r.assignment.items():
        if follower in e["replicas"] and e["leader"] != follower:
            out.setdefault(e["leader"], set()).add(k)
    return out


def test_alter_partition_leaders_propose_and_the_controller_answers_after_its_latency():
    """PartitionTest.testIsrExpansion/testMaybeShrinkIsr at cluster scale: a stall's shrinks and the recovery's
    expands are proposals, each committed LATENCY ms after its request went (AlterPartitionManager: one in flight)."""
    r = run(faults=(Fault("stall", 10_000, 40_000, broker=2),), kafka=KRAFT, duration_ms=60_000)
    registrations = [e for e in r.events if e["type"] == "broker_registration"]
    assert [(e["ts"], e["id"], e["fenced"]) for e in registrations] == [(0, b, False) for b in (1, 2, 3, 4)]
    following = r.following(2)
    assert {(d["topic"], d["partition"]) for d in r.decisions("shrink")} == following
    assert {(d["topic"], d["partition"]) for d in r.decisions("expand")} == following
    requests = _requests(r)
    items = [i for a in requests for i in a["partitions"]]
    assert sorted((i["topic"], i["partition"], i["kind"]) for i in items) == sorted(
        (d["topic"], d["partition"], d["kind"]) for d in r.result.decisions if d["kind"] in ("shrink", "expand")
    )
    # A request goes when a proposal is made, and the simulator takes it at its next event (that millisecond's,
    # or the next one's): the controller answers at least LATENCY later, nearly always exactly.
    assert all(a["response_ms"] - a["sent_ms"] >= LATENCY for a in requests)
    assert sum(a["response_ms"] - a["sent_ms"] == LATENCY for a in requests) >= 0.9 * len(requests)
    assert all(i["error"] is None and i["committed_isr"] == i["proposed_isr"] for i in items)
    responses = [e for e in r.events if e["type"] == "alter_partition_response"]
    assert len(responses) == len(items)
    for state in r.result.states:
        assert state["isr"] == sorted(state["replicas"]) and state["isr_state"] == "committed"


def test_stuck_controller_channel_holds_a_brokers_request_and_its_queue_grows():
    """AlterPartitionManagerTest.testOneInFlight with a controller that does not answer: the leader's first shrink
    stays in flight, the others wait in its queue; the answer at the fault's end sends them all in one request."""
    probe = run(kafka=KRAFT, duration_ms=0)
    # The follower with the most partitions of one leader, and that leader.
    follower, leader, shrinking = max(
        ((f, lead, keys) for f in (1, 2, 3, 4) for lead, keys in _led_and_followed(probe, f).items()),
        key=lambda t: len(t[2]),
    )
    assert len(shrinking) > 1
    hold = Fault("stuck-controller", 5000, 40_000, broker=leader)
    r = run(faults=(hold, Fault("stall", 10_000, 30_000, broker=follower)), kafka=KRAFT, duration_ms=60_000)
    first, second, *rest = _requests(r, leader)
    assert [(i["topic"], i["partition"]) for i in first["partitions"]] == [min(shrinking)] or len(
        first["partitions"]
    ) == 1
    assert first["response_ms"] == 40_000 and first["sent_ms"] < 30_000
    assert second["sent_ms"] == 40_000 and len(second["partitions"]) == len(shrinking) - 1
    assert {(i["topic"], i["partition"]) for a in (first, second) for i in a["partitions"]} == shrinking
    assert all(a["response_ms"] - a["sent_ms"] >= LATENCY for a in rest)
    assert second["response_ms"] - second["sent_ms"] == LATENCY  # sent at an answer: taken a millisecond later
    # Mid-hold, the broker's record shows the request in flight and the queue; its partitions are pending.
    mid = replay([[msgspec.json.encode(e) for e in r.events]], r.config.kafka, until=35_000)
    [record] = [b for b in mid.brokers if b.broker == leader]
    assert record.in_flight is not None and record.in_flight.sent_ms == first["sent_ms"]
    assert record.in_flight_age_ms == 35_000 - first["sent_ms"] and len(record.queue) == len(shrinking) - 1
    pending = {(s.topic, s.partition) for s in mid.records if s.isr_state == "pending_shrink"}
    assert pending == shrinking
    # No expand while a shrink is pending (Partition: isInflight), however long the follower has been back.
    assert all(d["ts"] > 40_000 for d in r.decisions("expand") if (d["topic"], d["partition"]) in shrinking)


def test_fenced_broker_is_refused_as_ineligible_until_the_leaders_learn_then_rejoins_once_unfenced():
    """PartitionTest.testIsrNotExpandedIfReplicaIsFencedOrShutdown, with the leaders' metadata late: until the
    registration says broker 2 is fenced, each expand adding it is answered INELIGIBLE_REPLICA and reverted; then no
    proposal adds it; once unfenced, it rejoins."""
    fence = Fault("fence", 30_000, 50_000, broker=2, notice_ms=2000)
    r = run(faults=(Fault("stall", 10_000, 30_000, broker=2), fence), kafka=KRAFT, duration_ms=60_000)
    items = [i for a in _requests(r) for i in a["partitions"] if i["kind"] == "expand"]
    refused = [i for i in items if i["error"] == "INELIGIBLE_REPLICA"]
    assert refused and all(30_000 <= i["submitted_ms"] < 32_000 for i in refused)
    assert all(i["committed_isr"] is None for i in refused)
    assert not [i for i in items if 32_000 + LATENCY < i["submitted_ms"] < 50_000]
    committed = [i for i in items if i["error"] is None]
    assert {(i["topic"], i["partition"]) for i in committed} == r.following(2)
    assert all(i["submitted_ms"] >= 50_000 for i in committed)
    registrations = [(e["ts"], e["fenced"]) for e in r.events if e["type"] == "broker_registration" and e["id"] == 2]
    assert registrations == [(0, False), (32_000, True), (50_000, False)]
    assert r.result.summary["failed_isr_updates_by_reason"] == {"INELIGIBLE_REPLICA": len(refused)}
    assert all(s["isr"] == sorted(s["replicas"]) for s in r.result.states)


def test_stuck_queue_story_holds_broker_1s_request_while_its_later_shrinks_queue_then_commits_them():
    """The AlterPartition demo's story: AlterPartitionManagerTest.testOneInFlight through two stalls. Broker 1's
    first shrink stays in flight for the whole hold; its shrinks from both stalls wait in its queue and go as one
    request at the answer (AlterPartitionManager@3.9.0-rc3 L224-227); its partitions expand only after."""
    r = run("stuck-queue", seed=0, kafka=KRAFT)  # the demo's seed
    hold, first_stall, second_stall = r.faults
    first, second, *later = _requests(r, hold.broker)
    assert first_stall.start_ms + LAG - 600 < first["sent_ms"] <= first_stall.start_ms + LAG + INTERVAL
    assert first["response_ms"] == hold.end_ms and second["sent_ms"] == hold.end_ms
    queued = [i["submitted_ms"] for i in second["partitions"]]
    assert min(queued) < second_stall.start_ms < max(queued)  # shrinks of both stalls, one request
    items = [i for a in (first, second, *later) for i in a["partitions"]]
    assert all(i["error"] is None and i["committed_isr"] == i["proposed_isr"] for i in items)
    assert all(d["ts"] > hold.end_ms for d in r.decisions("expand") if d["leader"] == hold.broker)
    for state in r.result.states:
        assert state["isr"] == sorted(state["replicas"]) and state["isr_state"] == "committed"


def test_alter_partition_faults_need_alter_partition_leaders():
    with pytest.raises(ConfigError, match="needs leaders that propose with AlterPartition"):
        list(simulate(SimConfig(kafka=KAFKA, duration_ms=1000), [Fault("stuck-controller", 0, broker=1)]))
