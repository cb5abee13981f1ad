"""Property tests over random event streams: invariants of §4 and the batch-independence of §6."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from isrwatch.state.config import Config
from isrwatch.state.engine import PartitionEngine
from isrwatch.state.events import parse_event
from isrwatch.state.partition import Outputs
from isrwatch.state.replay import replay_events
from isrwatch.state.schedule import INF
from isrwatch.streaming.testing import run_stateful
from tests.support.state import canonical, lines_of

BROKERS = [0, 1, 2, 3]
PARTITIONS = [("a", 0), ("a", 1), ("b", 0)]


ERRORS = [
    None,
    None,
    None,
    "OPERATION_NOT_ATTEMPTED",
    "INELIGIBLE_REPLICA",
    "INVALID_UPDATE_VERSION",
    "UNKNOWN_SERVER_ERROR",
]


@st.composite
def event(draw: st.DrawFn, with_hw: bool = True, alter_partition: bool = False) -> dict:
    kinds = ["fetch"] * 6 + ["append"] * 3 + ["leader_and_isr"] * 2 + ["tick"]
    if alter_partition:  # the leaders' answers from the controller and their KRaft metadata (SPEC §3, §4.9)
        kinds += ["alter_partition_response"] * 3 + ["broker_registration"]
    kind = draw(st.sampled_from(kinds))
    # Coarse times make ties with each other, with watermarks and with scheduled checks common.
    near_checks = st.tuples(st.integers(0, 1200), st.sampled_from([-1, 1])).map(lambda t: max(0, 100 * t[0] + t[1]))
    ts = draw(st.one_of(st.integers(0, 600).map(lambda k: 200 * k), st.integers(0, 120_000), near_checks))
    if kind == "tick":
        ev: dict = {"type": "tick", "ts": ts}
        task = draw(st.sampled_from([None, "isr-expiration", "isr-change-propagation"]))
        if task:
            ev["task"] = task
        return ev
    if kind == "broker_registration":
        return {
            "type": kind,
            "ts": ts,
            "id": draw(st.sampled_from(BROKERS)),
            "epoch": draw(st.integers(0, 2)),
            "fenced": draw(st.booleans()),
            "in_controlled_shutdown": draw(st.booleans()),
        }
    topic, partition = draw(st.sampled_from(PARTITIONS))
    ev = {"type": kind, "ts": ts, "topic": topic, "partition": partition}
    if kind == "append":
        ev["leader_leo"] = draw(st.integers(0, 500))
    elif kind == "fetch":
        leader_leo = draw(st.integers(0, 500))
        ev |= {
            "replica": draw(st.sampled_from(BROKERS)),
            "leader_leo": leader_leo,
            "fetch_offset": draw(st.integers(0, leader_leo + 5)),
        }
        if draw(st.booleans()):
            ev["current_leader_epoch"] = draw(st.integers(0, 4))
        if alter_partition and draw(st.booleans()):
            ev["broker_epoch"] = draw(st.integers(-1, 2))
    elif kind == "alter_partition_response":
        ev.update(broker=draw(st.sampled_from(BROKERS)), error=draw(st.sampled_from(ERRORS)))
        if ev["error"] is None:
            ev["isr"] = draw(st.lists(st.sampled_from(BROKERS), unique=True))
            ev["leader_epoch"] = draw(st.integers(0, 6))
            ev["partition_epoch"] = draw(st.integers(0, 22))
    else:
        replicas = draw(st.lists(st.sampled_from(BROKERS), min_size=1, max_size=4, unique=True))
        ev |= {
            "controller_epoch": draw(st.integers(0, 3)),
            "leader": draw(st.sampled_from([*replicas, -1])),
            "leader_epoch": draw(st.integers(0, 6)),
            "partition_epoch": draw(st.integers(0, 20)),
            "replicas": replicas,
            "isr": draw(st.lists(st.sampled_from(replicas), unique=True)),
            "leader_leo": draw(st.integers(0, 500)),
        }
        if with_hw and draw(st.booleans()):
            ev["hw"] = draw(st.integers(0, 500))
    return ev


def config_strategy() -> st.SearchStrategy[Config]:
    return st.builds(
        Config,
        replica_lag_time_max_ms=st.sampled_from([1000, 10_000, 30_000]),
        isr_expiration_interval_ms=st.sampled_from([None, 0, 700]),
        isr_change_check_interval_ms=st.sampled_from([0, 2500]),
        isr_change_max_delay_ms=st.sampled_from([20_000, 60_000]),
        schedule_origin_ms=st.sampled_from([0, 333]),
    )


def parse(events: list[dict]) -> list:
    return [parse_event(json.dumps(ev), seq=i, arrival=i) for i, ev in enumerate(events, start=1)]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=st.lists(event(), max_size=60),
    config=config_strategy(),
    lateness=st.one_of(st.sampled_from([200, 1000, 5000]), st.integers(1, 8000)),
    buckets=st.integers(1, 5),
    data=st.data(),
)
def test_any_cut_into_batches_gives_the_outputs_of_one_pass(
    events: list[dict], config: Config, lateness: int, buckets: int, data: st.DataObject
) -> None:
    """SPEC §6, the way Spark runs it: events arrive out of order within the lateness, cut into arbitrary
    micro-batches, hashed into buckets; the real state function runs each key under Spark's calling rules
    (watermark = newest ts seen before the batch minus the lateness, timeouts, no-data batches, state as
    bytes between calls) and the sink settles propagation per batch. Some batches fail once and run again from
    the state the batch before committed, as Spark re-runs a batch after a failure."""
    assert_cut_independent(events, config, lateness, buckets, data)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=st.lists(event(alter_partition=True), max_size=60),
    config=config_strategy(),
    kafka_version=st.sampled_from(["3.9.2", "4.1.0"]),
    lateness=st.one_of(st.sampled_from([200, 1000, 5000]), st.integers(1, 8000)),
    buckets=st.integers(1, 5),
    data=st.data(),
)
def test_any_cut_of_alter_partition_input_gives_the_outputs_of_one_pass(
    events: list[dict], config: Config, kafka_version: str, lateness: int, buckets: int, data: st.DataObject
) -> None:
    """The same with AlterPartition leaders (SPEC §4.9): proposals, answers and registrations cut anyhow give the
    one pass's decisions, states and requests: each broker's manager lives in the sink as the propagation book does."""
    config = Config(**{**config.to_dict(), "kafka_version": kafka_version, "isr_protocol": "alter_partition"})
    assert_cut_independent(events, config, lateness, buckets, data)


def assert_cut_independent(
    events: list[dict], config: Config, lateness: int, buckets: int, data: st.DataObject
) -> None:
    until = 130_000
    config = Config(**{**config.to_dict(), "allowed_lateness_ms": lateness})
    want = replay_events(parse(events), config, until)
    lines = lines_of(events)  # each carries its position as seq: ties order the same in any arrival order
    jitter = data.draw(st.lists(st.integers(0, lateness - 1), min_size=len(lines), max_size=len(lines)))
    arrivals = [line for _, _, line in sorted(zip(jitter, events, lines, strict=True), key=lambda j: j[1]["ts"] + j[0])]
    cuts = data.draw(st.lists(st.integers(0, len(arrivals)), max_size=8))
    aborts = data.draw(st.sets(st.integers(0, 8), max_size=3))
    got = run_stateful(arrivals, cuts, config, buckets, until, aborts=aborts)
    assert got.summary["late_events"] == 0
    assert canonical(got.decisions) == canonical(want.decisions)
    assert canonical(got.propagations) == canonical(want.propagations)
    assert canonical(got.records) == canonical(want.records)
    assert canonical(got.alter_partitions) == canonical(want.alter_partitions)
    assert canonical(got.brokers) == canonical(want.brokers)
    assert canonical([i.to_record() for i in got.incidents]) == canonical([i.to_record() for i in want.incidents])


@settings(max_examples=150, deadline=None)
@given(events=st.lists(event(with_hw=False), max_size=60), config=config_strategy())
def test_invariants_hold_after_every_step(events: list[dict], config: Config) -> None:
    """HW never decreases (without an explicit `hw`), shrinks keep the leader, ISR stays within AR."""
    engine = PartitionEngine(config)
    engine.add(parse(events))
    hw: dict = {}
    for until in sorted({ev["ts"] + 1 for ev in events}):
        out = engine.advance(until)
        for d in out.decisions:
            if d.kind == "shrink":
                assert d.leader not in d.replicas_changed
                if d.leader in d.isr_before:
                    assert d.leader in d.isr_after
                assert set(d.isr_after) < set(d.isr_before)
            if d.kind == "expand":
                assert set(d.isr_after) == set(d.isr_before) | set(d.replicas_changed)
        for key, p in engine.partitions.items():
            assert p.hw >= hw.get(key, 0)
            hw[key] = p.hw
            assert set(p.isr) <= set(p.replicas)
            assert list(p.isr) == sorted(p.isr)


@settings(max_examples=100, deadline=None)
@given(events=st.lists(event(), max_size=40), config=config_strategy())
def test_next_due_is_a_lower_bound_on_the_next_isr_change(events: list[dict], config: Config) -> None:
    """The sink trusts next_due: advancing to it must not produce any change before it."""
    engine = PartitionEngine(config)
    engine.add(parse(events))
    engine.advance(60_000)
    due = engine.next_due()
    out: Outputs = engine.advance(200_000)
    assert all(c.ts >= due for c in out.changes)
    if due < INF:
        assert due >= 60_000
