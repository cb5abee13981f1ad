"""Incidents (SPEC §8): one story of a stalled follower, a broker the controller removed and a controller change,
replayed in one pass and streamed in cuts, and the rules one at a time."""

from __future__ import annotations

import dataclasses
from operator import itemgetter
from pathlib import Path

import msgspec
import pytest

from isrwatch.state.config import Config
from isrwatch.state.events import BrokerRegistration
from isrwatch.state.incidents import Incident, IncidentBook
from isrwatch.state.records import (
    AlterPartitionItem,
    AlterPartitionRequest,
    BrokerRecord,
    DecisionKind,
    Divergence,
    DivergenceKind,
    Health,
    PartitionHealth,
)
from isrwatch.state.replay import ReplayResult, replay_events
from isrwatch.streaming.testing import run_stateful
from tests.support.incidents import CONFIG, story
from tests.support.state import canonical, lines_of, parse_all, run_local
from tests.support.state import run_stateful as run_stateful_lines

AGENT = Path(__file__).parents[1] / "agent"


@pytest.fixture(scope="module")
def replayed() -> ReplayResult:
    return replay_events(parse_all(story()), Config(**CONFIG))


def by_kind(incidents: list[Incident]) -> dict[str, Incident]:
    return {str(i.kind): i for i in incidents}


def test_a_stalled_follower_is_one_incident_across_leaders(replayed: ReplayResult) -> None:
    stuck = by_kind(replayed.incidents)["stuck"]
    assert (stuck.brokers, stuck.opened_ms, stuck.closed_ms) == ([2], 35_000, 46_000)
    assert stuck.leaders == [1, 3, 4]
    assert sorted((p.topic, p.partition, p.worst) for p in stuck.partitions) == [
        ("t", 0, Health.UNDER_REPLICATED),
        ("t", 1, Health.UNDER_REPLICATED),
        ("t", 2, Health.UNDER_REPLICATED),
        ("v", 0, Health.UNDER_MIN_ISR),
    ]
    v0 = next(p for p in stuck.partitions if p.topic == "v")
    assert [(s.state, s.start_ms, s.end_ms) for s in v0.intervals] == [(Health.UNDER_MIN_ISR, 35_000, 46_000)]
    assert stuck.worst is Health.UNDER_MIN_ISR and stuck.under_min_isr_ms == 11_000
    assert [d.kind for d in stuck.decisions].count(DecisionKind.SHRINK) == 4
    assert [d.kind for d in stuck.decisions].count(DecisionKind.EXPAND) == 4
    assert stuck.summary == (
        "broker 2 stopped fetching: removed as stuck from 4 partitions by leaders 1, 3, 4; 1 under min ISR for 11 s "
        "(producers with acks=all got NOT_ENOUGH_REPLICAS); back after 11 s"
    )


def test_a_broker_the_controller_removes_is_offline_until_back_in_every_isr(replayed: ReplayResult) -> None:
    offline = by_kind(replayed.incidents)["offline"]
    assert (offline.brokers, offline.opened_ms, offline.closed_ms) == ([4], 60_000, 80_000)
    assert sorted((p.topic, p.partition) for p in offline.partitions) == [("t", 1), ("t", 2), ("u", 0)]
    assert offline.worst is Health.UNDER_REPLICATED and offline.under_min_isr_ms == 0
    assert "none under min ISR" in offline.summary and offline.summary.endswith("back after 20 s")


def test_a_new_controller_epoch_is_an_incident(replayed: ReplayResult) -> None:
    controller = by_kind(replayed.incidents)["controller"]
    assert (controller.opened_ms, controller.controller_epoch, controller.partition_count) == (100_000, 2, 0)
    assert len(replayed.incidents) == 3


def test_the_timeline_counts_lanes_and_markers(replayed: ReplayResult) -> None:
    timeline = replayed.timeline
    counts = [(c.ts, c.under_replicated, c.under_min_isr, c.offline) for c in timeline.counts]
    assert counts == [(35_000, 4, 1, 0), (46_000, 0, 0, 0), (60_000, 3, 0, 0), (80_000, 0, 0, 0)]  # one per time
    lanes = {(i.broker, i.kind): (i.start_ms, i.end_ms, i.partitions) for i in timeline.intervals}
    assert lanes[(2, "out_of_sync")] == (35_000, 46_000, 4)
    assert lanes[(4, "out_of_sync")] == (60_000, 80_000, 3)
    assert lanes[(4, "offline")] == (60_000, 80_000, 3)
    assert lanes[(4, "leading_fewer")] == (60_000, None, 1)  # t-2's leadership did not come back
    assert lanes[(1, "leading_fewer")] == (100_000, None, 1)
    kinds = [m.kind for m in timeline.markers]
    assert kinds.count("shrink") == 4 and kinds.count("expand") == 7 and kinds.count("controller") == 1


def test_the_stream_in_any_cut_gives_the_replays_incidents(replayed: ReplayResult) -> None:
    lines = lines_of(story())
    for cuts in ([], [len(lines) // 3, len(lines) // 2], list(range(0, len(lines), 97))):
        got = run_stateful(lines, cuts, Config(**CONFIG), buckets=3, until=None)
        assert canonical([i.to_record() for i in got.incidents]) == canonical(
            [i.to_record() for i in replayed.incidents]
        )


def _health(ts: int, isr: list[int], replicas: list[int], health: Health, partition: int = 0) -> PartitionHealth:
    return PartitionHealth(ts, "c", "t", partition, health, 1, None, tuple(isr), tuple(replicas), 1)


def test_a_partition_short_of_its_isr_without_a_cause_opens_nothing() -> None:
    """A partition under-replicated from the start (no decision removed anyone) is counted, not an incident."""
    book = IncidentBook(Config())
    book.add([], [_health(10, [1], [1, 2], Health.UNDER_REPLICATED)])
    opened, changed, timeline, _ = book.advance({"c": 100})
    assert opened == changed == []
    assert [(c.ts, c.under_replicated) for c in timeline.counts] == [(10, 1)]


def test_a_quiet_partition_still_moves_the_controller_epoch_at_its_time() -> None:
    """Partitions at their full ISR that the book holds nothing of skip the ordered walk (a batch that settles every
    partition), but the first health of a higher controller epoch still counts at its time (rule 3): a LeaderAndIsr
    of that epoch after it opens no controller incident, one before it does."""

    def state(ts: int, partition: int, health: Health, epoch: int, leader_before: int | None) -> PartitionHealth:
        isr = (1, 2) if health is Health.OK else (1,)
        return PartitionHealth(ts, "c", "t", partition, health, 1, leader_before, isr, (1, 2), epoch)

    for quiet_at, expected in ((100, []), (300, ["controller"])):
        book = IncidentBook(Config())
        book.add([], [state(10, 0, Health.OK, 1, 1), state(10, 1, Health.OK, 1, 1)])
        assert book.advance({"c": 50})[0] == []
        book.add([], [state(quiet_at, 0, Health.OK, 2, None), state(200, 1, Health.UNDER_REPLICATED, 2, 1)])
        opened, _, _, _ = book.advance({"c": 1000})
        assert [i.kind for i in opened] == expected


def test_an_alter_partition_request_in_flight_too_long_is_pending_until_answered() -> None:
    """Rule 4, in the stream's cut: in flight at one frontier, answered at a later one."""
    config = Config(isr_change_pending_ms=5000, incident_window_ms=1000)
    item = AlterPartitionItem(
        topic="t",
        partition=0,
        kind=DecisionKind.SHRINK,
        proposed_isr=[1],
        leader_epoch=0,
        partition_epoch=0,
        submitted_ms=1000,
    )
    sent = AlterPartitionRequest(cluster="c", broker=1, sent_ms=1000, response_ms=None, partitions=[item])
    record = BrokerRecord(
        cluster="c",
        broker=1,
        pending=[],
        first_change_ts=None,
        last_isr_change_ms=0,
        last_propagation_ms=0,
        queue=[],
        in_flight=sent,
    )
    book = IncidentBook(config)
    opened, _, _, _ = book.advance({"c": 7000}, brokers=[record])
    assert [(i.kind, i.opened_ms, i.closed_ms) for i in opened] == [("isr_change_pending", 6000, None)]
    book = IncidentBook(config, book.to_bytes())
    answered = AlterPartitionRequest(cluster="c", broker=1, sent_ms=1000, response_ms=9000, partitions=[item])
    _, changed, timeline, _ = book.advance({"c": 20_000}, requests=[answered])
    assert [(i.opened_ms, i.closed_ms, i.partition_count) for i in changed] == [(6000, 9000, 1)]
    assert changed[0].summary.startswith("broker 1's AlterPartition request stuck in flight")
    assert [(i.kind, i.start_ms, i.end_ms) for i in timeline.intervals] == [("alter_partition_in_flight", 1000, 9000)]
    # One pass sees only the answered request: the same incident.
    _, once, _, _ = IncidentBook(config).advance({"c": 20_000}, requests=[answered])
    assert [i.to_record() for i in once] == [i.to_record() for i in changed]


def test_divergences_of_one_broker_are_one_incident_and_timing_ones_none() -> None:
    book = IncidentBook(Config(incident_window_ms=1000))
    found = [
        Divergence(ts=ts, cluster="c", broker=2, kind=kind, subject="isr", topic="t", partition=0)
        for ts, kind in (
            (100, DivergenceKind.MISSED_BY_MODEL),
            (400, DivergenceKind.TIMING),
            (600, DivergenceKind.DIFFERENT_ISR),
        )
    ]
    _, changed, timeline, _ = book.advance({"c": 5000}, divergences=found)
    assert len(changed) == 1 and changed[0].counts == {"different_isr": 1, "missed_by_model": 1}
    assert (changed[0].opened_ms, changed[0].closed_ms) == (100, 600)
    assert [m.kind for m in timeline.markers] == ["divergence", "divergence"]


def recording(data: str, with_seq: bool) -> list[dict]:
    """A repository recording of isrwatch-agent on three brokers (tests/agent/data*/README.md), as events in time
    order (the ZooKeeper one without `seq`, as tests/state/test_agent_recording.py streams it)."""
    lines = [line for b in (1, 2, 3) for line in (AGENT / data / f"broker{b}.events.jsonl").read_bytes().splitlines()]
    events = [msgspec.json.decode(line) for line in lines]
    if not with_seq:
        return sorted(({k: v for k, v in e.items() if k != "seq"} for e in events), key=itemgetter("ts"))
    return sorted(events, key=lambda e: (e["ts"], e["broker"], e["seq"]))


@pytest.mark.parametrize(
    ("data", "with_seq", "lag", "want"),
    [
        # SIGSTOP broker 3 (12 s), SIGSTOP broker 1 (9 s), SIGKILL broker 2 (its session expires: a new controller),
        # the brokers stopped at the end (offline, not back before the recording ends).
        (
            "data",
            False,
            6000,
            [
                ("stuck", [3], True),
                ("stuck", [1], True),
                ("offline", [2], True),
                ("controller", [], True),
                ("offline", [2], False),
                ("offline", [1], False),
            ],
        ),
        # stall broker 3 (10 s), then "fence" broker 2: it stalls 22 s and the controller fences it after 18 s.
        ("data-kraft", True, 5000, [("stuck", [3], True), ("offline", [2], True)]),
    ],
)
def test_a_recording_gives_one_incident_per_stalled_broker_in_replay_and_stream(
    data: str, with_seq: bool, lag: int, want: list
) -> None:
    events = recording(data, with_seq)
    config = dataclasses.asdict(Config(replica_lag_time_max_ms=lag).with_profile("agent"))
    replayed, streamed = run_local(events, **config), run_stateful_lines(events, **config)
    assert [(i["kind"], i["brokers"], i["closed_ms"] is not None) for i in replayed.incidents] == want
    stalled = [i for i in replayed.incidents if i["counts"].get("stuck")]
    assert all(i["summary"].startswith(f"broker {i['brokers'][0]} stopped fetching") for i in stalled)
    assert canonical(streamed.incidents) == canonical(replayed.incidents)


def _registration(ts: int, reporter: int, broker: int, fenced: bool) -> BrokerRegistration:
    return BrokerRegistration(
        ts=ts, cluster="c", broker=reporter, id=broker, epoch=1, fenced=fenced, in_controlled_shutdown=False
    )


def test_a_broker_fenced_by_most_reporters_is_offline_until_unfenced() -> None:
    """Rule 2b: a broker fenced when first seen opens nothing; fenced later, by most of the brokers that report it,
    it is an offline incident held open until they report it unfenced, and a `fenced` lane."""
    book = IncidentBook(Config(incident_window_ms=1000))
    reports = [
        _registration(0, 1, 2, True),  # starting up
        _registration(10, 1, 2, False),
        _registration(10, 3, 2, False),
        _registration(5000, 1, 2, True),  # one of two: not yet
        _registration(5100, 3, 2, True),
        _registration(9000, 2, 2, False),  # the fenced broker's own stale view: one of three
        _registration(20_000, 3, 2, False),
        _registration(20_050, 1, 2, False),
    ]
    book.add([], [], reports)
    _, held, _, _ = book.advance({"c": 15_000})
    assert [(i.kind, i.brokers, i.opened_ms, i.closed_ms) for i in held] == [("offline", [2], 5100, None)]
    _, closed, timeline, _ = book.advance({"c": 30_000})
    assert [(i.opened_ms, i.closed_ms, i.offline_ms) for i in closed] == [(5100, 20_000, 5100)]
    lanes = [(i.kind, i.start_ms, i.end_ms) for i in timeline.intervals]
    assert ("fenced", 5100, 20_000) in lanes and ("offline", 5100, 20_000) in lanes
