"""A lone event far ahead of its cluster cannot move the cluster's time (SPEC §6, "A jump needs a witness").

Run through the real state function without Spark (`isrwatch.streaming.testing.run_stateful`), at random micro-batch
cuts: a backfill of old files with one event a year ahead (only that event is refused; the rest equals a replay), a
real jump (a later file) taken at once, and a real recording of three 3.9 brokers with one broker's clock a year
ahead or ten minutes behind (the partitions it never leads, and the other brokers' batches, equal a replay without
that broker's events).
"""

from __future__ import annotations

import json
import random

import msgspec
import pytest

from isrwatch.sim.synthetic import StreamShape, generate
from isrwatch.state.clock import ClockBook
from isrwatch.state.config import Config
from isrwatch.state.eventtime import frontier_of, outvoted
from isrwatch.state.replay import ReplayResult, replay
from isrwatch.streaming.reports import BUCKET_STATE_VERSION, BucketState
from isrwatch.streaming.testing import run_stateful
from tests.support.corroboration import AGENT, TIME_FIELDS, YEAR_MS, encoded, led_by, recording

START_MS = 1_700_000_000_000


def cuts(count: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return sorted(rng.sample(range(1, count), rng.randrange(5, 40)))


def as_json(rows: list) -> list[str]:
    return sorted(msgspec.json.encode(r).decode() for r in rows)


def backfill(jump_ms: int) -> list[dict]:
    """Two minutes of a simulated cluster without brokers (old files), each event numbered by its position."""
    shape = StreamShape(partitions=12, brokers=4, topics=2, stuck_followers=1, slow_followers=1, start_ms=START_MS)
    events = list(generate(shape, 9000, seed=5))
    assert events[-1]["ts"] - events[0]["ts"] > 100_000  # the cluster's time moves well past max_future_ms
    return [{**ev, "seq": i, "ts": ev["ts"] + (jump_ms if i >= len(events) // 2 else 0)} for i, ev in enumerate(events)]


@pytest.mark.parametrize(("place", "seed"), [(0.2, 1), (0.5, 2), (0.2, 3)])
def test_one_event_a_year_ahead_in_a_backfill_is_refused_alone(place: float, seed: int) -> None:
    """Today's frontier took the lone event's year and made every later event late; now it waits for a witness, none
    comes while its cluster's time moves max_future_ms on, and it alone is a `ts_in_future` dead letter."""
    events = backfill(0)
    at = int(len(events) * place)
    wrong = {**events[at], "ts": events[at]["ts"] + YEAR_MS}
    lines = encoded(events[:at] + [wrong] + events[at + 1 :])
    config = Config()
    streamed = run_stateful(lines, cuts(len(lines), seed), config)
    replayed = replay([encoded(events[:at] + events[at + 1 :])], config)
    assert [(d.reason.split(":")[0], d.field, d.ts) for d in streamed.dead_letters] == [
        ("ts_in_future", "ts", wrong["ts"])
    ]
    assert streamed.summary["late_events"] == 0
    for name in ("decisions", "propagations", "records"):
        assert as_json(getattr(streamed, name)) == as_json(getattr(replayed, name)), name


@pytest.mark.parametrize("seed", [4, 5])
def test_a_later_file_is_a_real_jump_and_is_taken_at_once(seed: int) -> None:
    """Every clock moving two days at once (a later file) is corroborated by its own events: nothing waits for long,
    nothing is refused, and the outputs are the replay's."""
    lines = encoded(backfill(2 * 24 * 3600 * 1000))
    streamed = run_stateful(lines, cuts(len(lines), seed), Config())
    replayed = replay([lines], Config())
    assert streamed.dead_letters == [] and streamed.summary["late_events"] == 0
    for name in ("decisions", "propagations", "records"):
        assert as_json(getattr(streamed, name)) == as_json(getattr(replayed, name)), name


@pytest.mark.parametrize(("skewed", "shift_ms", "seed"), [(3, YEAR_MS, 6), (1, YEAR_MS, 7), (3, -600_000, 8)])
def test_a_broker_a_year_ahead_or_ten_minutes_behind_changes_nothing_it_does_not_lead(
    skewed: int, shift_ms: int, seed: int
) -> None:
    """A real recording, one broker's clock moved: the decisions on the partitions it never leads and the other
    brokers' batches equal a replay without that broker's events; none of the others' events is late or refused."""
    events = recording(skewed, shift_ms)
    lines = encoded(events)
    streamed = run_stateful(lines, cuts(len(lines), seed), AGENT)
    others = encoded([ev for ev in events if ev.get("broker") != skewed])
    replayed = replay([others], AGENT)
    theirs = led_by(skewed, events)
    assert theirs and theirs != {(ev["topic"], ev["partition"]) for ev in events if "partition" in ev}

    # A finite input's end trusts what still waits (its last max_future_ms of a year-ahead clock), as a replay does.
    end = max(ev["ts"] for ev in events if ev.get("broker") != skewed)

    def judged(result: ReplayResult) -> tuple[list[str], list[str]]:
        decisions = [d for d in result.decisions if (d.topic, d.partition) not in theirs and d.ts <= end]
        return as_json(decisions), as_json([p for p in result.propagations if p.broker != skewed and p.ts <= end])

    assert judged(streamed) == judged(replayed)
    assert len(judged(replayed)[0]) >= 5
    refused = [json.loads(d.raw) for d in streamed.dead_letters]
    assert refused and all(ev["broker"] == skewed for ev in refused)


@pytest.mark.parametrize("seed", [9, 10])
def test_a_lone_broker_whose_clock_jumps_is_its_own_witness(seed: int) -> None:
    """A cluster with one reporting broker (here broker 3's stream alone) has no other clock to ask: when its time
    jumps two minutes (a paused agent resuming), its own next events corroborate the jump as they come (not only when
    the input ends), nothing is refused, and the outputs are the replay's. (A broker among others needs another
    broker's witness: the year-ahead test.)"""
    alone = [ev for ev in recording() if ev.get("broker") == 3]
    half = len(alone) // 2
    jumped = alone[:half] + [{k: v + 120_000 if k in TIME_FIELDS else v for k, v in ev.items()} for ev in alone[half:]]
    lines = encoded(jumped)
    streamed = run_stateful(lines, cuts(len(lines), seed), AGENT)
    replayed = replay([lines], AGENT)
    assert streamed.dead_letters == [] and streamed.summary["late_events"] == 0
    for name in ("decisions", "propagations", "records"):
        assert as_json(getattr(streamed, name)) == as_json(getattr(replayed, name)), name
    live = run_stateful(lines, cuts(len(lines), seed), AGENT, finish=False)
    after = jumped[half]["ts"] + 30_000
    settled = as_json([d for d in live.decisions if d.ts > after])
    assert settled and set(settled) <= set(as_json(replayed.decisions))


@pytest.mark.parametrize(("skewed", "shift_ms", "seed"), [(3, 90_000, 6), (1, 90_000, 7), (2, -90_000, 8)])
def test_one_clock_a_minute_and_a_half_off_cannot_outvote_the_others(skewed: int, shift_ms: int, seed: int) -> None:
    """SPEC §6, one clock per cluster (`clock.outvoted`): a broker 90 s ahead was a jump that arrived as soon as the
    cluster's time came within `max_future_ms` of it, and then moved that time 90 s on: every later event of the
    healthy brokers was late (376 dead letters here). Its clock is more than `max_future_ms` from its cluster's median,
    so it moves no frontier and holds nothing back: none of the others' events is refused, and what it does not lead
    is a replay without it."""
    events = recording(skewed, shift_ms)
    lines = encoded(events)
    streamed = run_stateful(lines, cuts(len(lines), seed), AGENT)
    assert [json.loads(d.raw) for d in streamed.dead_letters if json.loads(d.raw).get("broker") != skewed] == []
    theirs = led_by(skewed, events)
    others = replay([encoded([ev for ev in events if ev.get("broker") != skewed])], AGENT)
    end = max(ev["ts"] for ev in events if ev.get("broker") != skewed)

    def judged(result: ReplayResult) -> list[str]:
        return as_json([d for d in result.decisions if (d.topic, d.partition) not in theirs and d.ts <= end])

    assert judged(streamed) == judged(others) and len(judged(others)) >= 5


def test_an_outvoted_clock_holds_the_brokers_frontier_back_no_more() -> None:
    """Brokers 1 and 2 send watermarks; broker 3, a year ahead, sends events (each a jump, so none of its watermarks
    ever arrives). A reporter without a watermark keeps its cluster on the lateness fallback; an outvoted one does not
    count (`eventtime.frontier_of`): the others' streams set the frontier."""
    now = START_MS
    held = BucketState(BUCKET_STATE_VERSION, newest={"lab": now}, brokers={"lab": {1, 2, 3}})
    held.watermarks = {"lab": {1: now - 100, 2: now - 200}}
    held.named = {"lab": {1, 2, 3}}
    book = ClockBook()
    for broker, ts in ((1, now), (2, now - 50), (3, now + YEAR_MS)):
        book.observe("lab", broker, ts, None)
    fallback = now - AGENT.allowed_lateness_ms
    assert frontier_of(held, "lab", AGENT) == fallback
    held.clocks = book.samples()
    assert outvoted(held, AGENT) == {"lab": {3}}
    # The least of the others' streams, less the rejoin margin: broker 3 stays named, as one away.
    assert frontier_of(held, "lab", AGENT, {3}) == now - 201 - AGENT.broker_rejoin_margin_ms > fallback
