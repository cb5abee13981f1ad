"""The brokers' clock offsets (SPEC §6, clock offsets): a broker with a wrong clock is shown with its offset.

The recording of three real Kafka 3.9.2 brokers (tests/agent/data) with broker 1's clock a year ahead and broker 3's
ten minutes behind: the replay, the streaming shell cut line by line and the real Spark query give those brokers
their offsets and broker 2 none, also when the skewed events are refused as `ts_in_future`.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from isrwatch.state.clock import CLOCK_WINDOW_MS, ClockBook, median, outvoted
from isrwatch.state.config import Config
from isrwatch.state.records import BrokerRecord
from isrwatch.state.replay import replay
from isrwatch.streaming.testing import run_stateful
from tests.support.clock import SKEW, TOLERANCE_MS, YEAR, skewed_lines

CONFIG = Config(replica_lag_time_max_ms=6000).with_profile("agent")
FIRST_TS = 1795473383119  # the recording's first event


def offsets(brokers: list[BrokerRecord]) -> dict[int, int | None]:
    return {b.broker: b.clock_offset_ms for b in brokers}


def assert_skew_shown(shown: dict[int, int | None]) -> None:
    assert set(shown) == {1, 2, 3}
    for broker in (1, 2, 3):
        offset = shown[broker]
        assert offset is not None and abs(offset - SKEW.get(broker, 0)) < TOLERANCE_MS, (broker, offset)
    assert shown[2] == 0  # the median broker


def test_the_replay_shows_a_year_ahead_and_ten_minutes_behind() -> None:
    result = replay([skewed_lines(b) for b in (1, 2, 3)], CONFIG)
    assert_skew_shown(offsets(result.brokers))


def test_refused_events_still_show_their_brokers_clock() -> None:
    """Judged against an arrival (`--now`), broker 1's events are all `ts_in_future` dead letters: nothing of them is
    applied, and its year shows all the same."""
    result = replay([skewed_lines(b) for b in (1, 2, 3)], CONFIG, now=FIRST_TS + 200_000)
    assert result.summary["dead_letters_by_reason"] == {"ts_in_future": len(skewed_lines(1))}
    assert_skew_shown(offsets(result.brokers))


def test_the_stream_cut_line_by_line_shows_what_the_replay_shows() -> None:
    lines = [line for b in (1, 2, 3) for line in skewed_lines(b)]
    want = offsets(replay([lines], CONFIG).brokers)
    config = Config(replica_lag_time_max_ms=6000, allowed_lateness_ms=2 * YEAR).with_profile("agent")
    streamed = run_stateful(lines, range(len(lines)), config, buckets=4)
    assert offsets(streamed.brokers) == want
    # Every line arriving at one time (a backfill): the same offsets, the refused year-ahead events included.
    received = FIRST_TS + 200_000
    backfill = run_stateful(lines, range(0, len(lines), 97), config, buckets=4, received=received)
    assert backfill.summary["dead_letters_by_reason"]["ts_in_future"] == len(skewed_lines(1))
    assert offsets(backfill.brokers) == want


def test_events_after_until_show_their_clocks_in_the_stream_as_in_the_replay() -> None:
    """A replay parses every line, --until or not; the stream's control key, which receives the events after it,
    samples them as well."""
    lines = [line for b in (1, 2, 3) for line in skewed_lines(b)]
    until = FIRST_TS + 60_000
    want = offsets(replay([lines], CONFIG, until=until).brokers)
    config = Config(replica_lag_time_max_ms=6000, allowed_lateness_ms=2 * YEAR).with_profile("agent")
    streamed = run_stateful(lines, range(0, len(lines), 50), config, buckets=4, until=until)
    assert streamed.summary["events_after_until"] > 0
    assert offsets(streamed.brokers) == want
    assert_skew_shown(want)


@pytest.mark.spark
def test_the_spark_query_shows_the_skewed_brokers(spark, tmp_path: Path) -> None:
    """The real streaming query over three files (arrival: each file's modification time), in the suite's Spark
    session (a session this test made on its own would lack the Kafka connector the later Kafka tests need)."""
    from isrwatch.streaming.replay_spark import replay_spark

    paths = []
    for b in (1, 2, 3):
        path = tmp_path / f"broker{b}.jsonl"
        path.write_bytes(b"\n".join(skewed_lines(b)) + b"\n")
        paths.append(path)
    config = Config(replica_lag_time_max_ms=6000, allowed_lateness_ms=2 * YEAR).with_profile("agent")
    result = replay_spark(paths, config, None, buckets=4)
    assert_skew_shown(offsets(result.brokers))


def test_delivery_delay_and_a_common_clock_do_not_count() -> None:
    """With arrival times the lead is the fastest delivery in the latest two windows: a burst delayed by seconds,
    and a monitor whose clock is off for every broker alike, show no offset; a broker 40 s ahead shows 40 s."""
    book = ClockBook()
    monitor = 7_000  # the monitor's clock is 7 s behind every broker's
    for t in range(1_000_000, 1_100_000, 500):
        for broker in (1, 2, 3, 4):
            delay = 20 + (5_000 if broker == 2 and t % 10_000 < 2_000 else 0)  # broker 2's bursts wait 5 s
            ts = t + (40_000 if broker == 4 else 0)
            book.observe("c", broker, ts, t + delay - monitor)
    got = book.offsets()
    assert got[("c", 1)] == got[("c", 2)] == got[("c", 3)] == 0
    assert got[("c", 4)] == 40_000


def test_a_clock_set_right_shows_within_two_windows() -> None:
    book = ClockBook()
    for t in range(0, 200_000, 1_000):
        for broker in (1, 2, 3):
            ahead = YEAR if broker == 1 and t < 100_000 else 0
            book.observe("c", broker, t + ahead, t)
        if t == 99_000:
            assert book.offsets()[("c", 1)] == YEAR
    assert book.offsets()[("c", 1)] == 0
    assert all(len(w) <= 2 for w in book.windows.values())


def test_brokers_with_and_without_arrival_times_are_not_compared() -> None:
    book = ClockBook()
    book.observe("c", 1, 5_000_000, 5_000_000)
    book.observe("c", 2, 5_000_000, 4_990_000)  # 10 s ahead of broker 1
    book.observe("c", 3, 9_000_000, None)  # no arrival time: alone in its group
    book.observe("d", 1, YEAR, None)  # another cluster
    assert book.offsets() == {("c", 1): -5_000, ("c", 2): 5_000, ("c", 3): 0, ("d", 1): 0}


def test_the_offsets_depend_on_the_events_seen_not_their_order_or_cut() -> None:
    """Merging samples is a lattice: any order, any split into books, any repetition gives the same book."""
    rng = random.Random(7)
    events = [
        ("c", rng.randrange(1, 6), rng.randrange(10**6, 10**6 + 200_000), rng.choice([None, *range(0, 300_000, 997)]))
        for _ in range(2_000)
    ]
    whole = ClockBook()
    for ev in events:
        whole.observe(*ev)
    for _ in range(20):
        shuffled = events + rng.sample(events, 200)  # some seen twice, as a tick reaches every key
        rng.shuffle(shuffled)
        merged = ClockBook()
        size = rng.randrange(1, 300)
        for start in range(0, len(shuffled), size):
            part = ClockBook()
            for ev in shuffled[start : start + size]:
                part.observe(*ev)
            merged.merge(ClockBook(part.to_bytes()).samples())
        assert merged.samples() == whole.samples()
        assert merged.offsets() == whole.offsets()
    assert {s.window for s in whole.samples()} == {298_103 // CLOCK_WINDOW_MS - 1, 298_103 // CLOCK_WINDOW_MS}


def test_median() -> None:
    assert median([3, 1, YEAR]) == 3
    assert median([4, 1, YEAR, -YEAR]) == 2


def test_one_clock_cannot_outvote_the_others() -> None:
    """SPEC §6 (`clock.outvoted`): of three or more brokers, those more than max_future_ms from the cluster's median
    clock, while fewer than half of them, are outvoted; either side of the bound; never of two, nor a half."""
    now, mf = 1_000_000, 60_000
    assert outvoted({1: now, 2: now + 5, 3: now + YEAR}, mf) == {3}
    assert outvoted({1: now, 2: now + 5, 3: now - 600_000}, mf) == {3}
    assert outvoted({1: now, 2: now, 3: now + mf}, mf) == set()  # at the bound: within
    assert outvoted({1: now, 2: now, 3: now + mf + 1}, mf) == {3}
    assert outvoted({1: now, 2: now + YEAR}, mf) == set()  # one against one: neither can be told wrong
    assert outvoted({1: now, 2: now, 3: now + YEAR, 4: now + YEAR}, mf) == set()  # a half is no minority
    assert outvoted({1: now, 2: now, 3: now, 4: now + YEAR, 5: now - YEAR}, mf) == {4, 5}
    book = ClockBook()
    for broker, ts in ((1, now), (2, now + 7), (3, now + YEAR)):
        book.observe("c", broker, ts, None)
        book.observe("d", broker, now - YEAR if broker == 3 else ts, None)  # behind as far
    assert book.outvoted(mf) == {("c", 3), ("d", 3)}
