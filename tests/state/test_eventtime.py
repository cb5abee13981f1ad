"""The stream's event-time policy in the core (`state.eventtime`, SPEC §6), without Spark: which lines a state key
takes, which are late or refused, which wait for a witness, and what the engine takes of what it holds."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from isrwatch.state.clock import ClockSample
from isrwatch.state.config import Config
from isrwatch.state.events import DeadLetter, Event, parse_event
from isrwatch.state.eventtime import Jump, Line, Role, classify, frontier_of, split_due

CONFIG = Config(allowed_lateness_ms=1000, max_future_ms=10_000)
YEAR_MS = 365 * 24 * 3600 * 1000


@dataclass
class State:
    """A state key's event time (`eventtime.Held`), as the shell's bucket state holds it."""

    newest: dict[str, int] = field(default_factory=dict)
    applied: dict[str, int] = field(default_factory=dict)
    jumps: list[Jump] = field(default_factory=list)
    brokers: dict[str, set[int]] = field(default_factory=dict)
    watermarks: dict[str, dict[int, int]] = field(default_factory=dict)
    named: dict[str, set[int]] = field(default_factory=dict)
    unbounded: set[str] = field(default_factory=set)
    ahead: dict[str, list[tuple[str, int, int]]] = field(default_factory=dict)
    clocks: list[ClockSample] = field(default_factory=list)


def fetch(ts: int, broker: int | None = None) -> bytes:
    ev = {"type": "fetch", "ts": ts, "cluster": "c", "topic": "t", "partition": 0, "replica": 2, "fetch_offset": 0}
    return json.dumps(ev | {"leader_leo": 0} | ({} if broker is None else {"broker": broker})).encode()


def lines(*raws: bytes, role: Role = Role.EVENT, received: int | None = None) -> list[Line]:
    return [(raw, i, 0, int(role), received) for i, raw in enumerate(raws)]


def times(events: list[Event]) -> list[int]:
    return sorted(ev.ts for ev in events)


def test_a_line_at_or_behind_the_frontier_a_call_started_with_is_late_and_changes_nothing() -> None:
    held, dead = State(), []
    classify(lines(fetch(5_000)), held, CONFIG, True, dead)
    assert frontier_of(held, "c", CONFIG) == 4_000
    arrived, behind, _ = classify(lines(fetch(4_000), fetch(4_001), fetch(9_000)), held, CONFIG, True, dead)
    assert times(arrived["c"]) == [4_001, 9_000] and behind == {}
    assert [(d.ts, d.reason.split(":")[0]) for d in dead] == [(4_000, "late")]
    assert held.newest == {"c": 9_000}


def test_a_beacon_moves_its_clusters_time_and_arrives_nowhere_and_a_line_counts_where_it_is_counted() -> None:
    held, dead = State(newest={"c": 5_000}), []
    arrived, _, _ = classify(lines(fetch(8_000), fetch(1_000), role=Role.BEACON), held, CONFIG, False, dead)
    assert arrived == {} and held.newest == {"c": 8_000}
    assert dead == []  # a late beacon is dead where its own event is counted, not here


def test_a_line_dated_past_max_future_ms_after_it_arrived_is_refused() -> None:
    held, dead = State(newest={"c": 5_000}), []
    arrived, _, _ = classify(lines(fetch(20_000), received=5_000), held, CONFIG, True, dead)
    assert arrived == {} and [d.reason.split(":")[0] for d in dead] == ["ts_in_future"]
    assert held.newest == {"c": 5_000}


def test_a_lone_jump_waits_for_a_witness_and_arrives_with_it() -> None:
    held, dead = State(newest={"c": 5_000}, brokers={"c": {1, 2}}), []
    arrived, _, _ = classify(lines(fetch(5_000 + YEAR_MS, broker=3)), held, CONFIG, True, dead)
    assert arrived == {} and held.newest == {"c": 5_000} and len(held.jumps) == 1
    arrived, _, _ = classify(lines(fetch(5_100 + YEAR_MS, broker=1)), held, CONFIG, True, dead)
    assert times(arrived["c"]) == [5_000 + YEAR_MS, 5_100 + YEAR_MS] and held.jumps == [] and dead == []


def test_a_jump_nothing_corroborates_is_refused_once_its_cluster_moves_max_future_ms_on() -> None:
    held, dead = State(newest={"c": 5_000}, brokers={"c": {1, 2}}), []
    classify(lines(fetch(5_000 + YEAR_MS, broker=3)), held, CONFIG, True, dead)
    classify(lines(fetch(14_999, broker=1)), held, CONFIG, True, dead)
    assert len(held.jumps) == 1 and dead == []
    arrived, _, _ = classify(lines(fetch(15_000, broker=2)), held, CONFIG, True, dead)
    assert times(arrived["c"]) == [15_000] and held.jumps == []
    assert [d.ts for d in dead] == [5_000 + YEAR_MS] and "jumped more than max_future_ms" in dead[0].reason


def test_every_valid_reported_line_shows_its_clock_and_a_fetch_behind_the_frontier_waits_for_the_engine() -> None:
    held, dead = State(newest={"c": 5_000}), []
    arrived, behind, clocks = classify(lines(fetch(1_000, 1), fetch(6_000, 2), b"{"), held, CONFIG, True, dead)
    assert [(s.broker, s.lead) for s in clocks] == [(1, 1_000), (2, 6_000)]
    assert times(arrived["c"]) == [6_000] and len(dead) == 1 and dead[0].ts is None
    # a broker's fetch behind the frontier may be a caught-up repeat the engine still takes (`Behind`)
    assert [(b.event.ts, b.bound, b.partition) for b in behind["c"]] == [(1_000, 4_000, False)]


@dataclass
class Slice:
    first: int
    last: int
    held: list[Event]
    reads: list[int]

    def events(self) -> list[Event]:
        self.reads.append(self.first)
        return self.held


def test_what_the_engine_takes_of_held_slices_reads_only_the_slices_reach_reaches() -> None:
    reads: list[int] = []

    def slices(events: list[Event]) -> list[Slice]:
        return [Slice(ev.ts, ev.ts, [ev], reads) for ev in sorted(events, key=lambda ev: ev.ts)]

    evs = [ev for ts in range(0, 400, 100) if not isinstance(ev := parse_event(fetch(ts), ts), DeadLetter)]
    held = slices(evs)
    due, pending = split_due(held, -1, [], 250, slices)
    assert due is not None and times(due) == [0, 100, 200] and pending == held[3:] and reads == [0, 100, 200]
    wide = Slice(250, 350, evs[3:], reads)
    due, pending = split_due([wide], -1, evs[:1], 300, slices)  # reach cuts it: read, and held again as slices
    assert due is not None and times(due) == [0] and [p.first for p in pending] == [300] and pending[0] is not wide
    assert split_due(held, 500, [], 500, slices) == (None, held)  # not past what the engine applied: nothing runs


def test_an_outvoted_clock_moves_no_time() -> None:
    """SPEC §6, one clock per cluster: broker 3 runs 15-25 s ahead of brokers 1 and 2 (max_future_ms 10 s). Its
    lines jump and wait; once the others' time comes within reach of the first, it arrives, but broker 3's clock is
    more than max_future_ms from the median of the three (outvoted): the cluster's time stays the others'. Without
    the rule it moved to broker 3's time, and every later line of the others was late."""
    held, dead = State(newest={"c": 5_000}, brokers={"c": {1, 2, 3}}), []
    classify(lines(fetch(5_100, 1), fetch(5_200, 2), fetch(20_000, 3), fetch(30_000, 3)), held, CONFIG, True, dead)
    assert held.newest == {"c": 5_200} and len(held.jumps) == 2
    arrived, _, _ = classify(lines(fetch(10_500, 1), fetch(10_600, 2)), held, CONFIG, True, dead)
    assert times(arrived["c"]) == [10_500, 10_600, 20_000] and held.newest == {"c": 10_600} and dead == []
    two = State(newest={"c": 5_000}, brokers={"c": {1, 3}})
    classify(lines(fetch(5_100, 1), fetch(14_000, 3)), two, CONFIG, True, [])
    assert two.newest == {"c": 14_000}  # of two clocks neither can be told wrong
