"""Each broker on its own time (SPEC §6): a cluster whose every source is a broker sending watermarks is applied as
far as every broker's own stream has passed, not `allowed_lateness_ms` behind its newest event, and the outputs still
equal a one-pass replay whatever the micro-batch cuts and whatever pace each broker's events arrive at.

Run through the real state function without Spark (`isrwatch.streaming.testing.run_stateful`) on the real agent
recordings (ZooKeeper 3.9 and KRaft 4.4.0 brokers, with stalls, a fence, leadership moves), each broker's stream given
the agent's watermarks (`with_watermarks`: what `isrwatch-agent` promises, that every later event has `ts` >= W),
the brokers' streams interleaved at random paces, one broker going silent half-way, cut into random micro-batches.
"""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import msgspec
import pytest

from isrwatch.state.config import Config
from isrwatch.state.events import parse_event, sorts_at
from isrwatch.state.frontier import brokers_frontier, cluster_frontier
from isrwatch.state.replay import ReplayResult, replay
from isrwatch.state.step import Settled
from isrwatch.streaming.sink import Frontiers
from isrwatch.streaming.testing import run_stateful

AGENT_DATA = Path(__file__).parents[1] / "agent"
MAX_DELAY_MS = 2000  # how far one broker's delivery trails its emission here: within the rejoin margin
RECORDINGS = {
    mode: (
        AGENT_DATA / data,
        replace(Config(replica_lag_time_max_ms=lag), broker_rejoin_margin_ms=MAX_DELAY_MS).with_profile("agent"),
    )
    for mode, data, lag in (("zookeeper", "data", 6000), ("kraft", "data-kraft", 5000))
}
WATERMARK_EVERY_MS = 200  # the agent's default `watermark.interval.ms`


def broker_streams(data: Path) -> dict[int, list[dict]]:
    """Each broker's recorded stream in the order the agent emitted it (its file's order, by seq)."""
    return {
        broker: [json.loads(line) for line in (data / f"broker{broker}.events.jsonl").read_bytes().splitlines()]
        for broker in (1, 2, 3)
    }


def sort_ts(ev: dict) -> int:
    parsed = parse_event(json.dumps(ev), 0)
    assert not hasattr(parsed, "reason"), parsed
    return sorts_at(parsed)  # type: ignore[arg-type]


def held_repeats(stream: list[dict]) -> set[int]:
    """Positions of the fetches the agent held (coalescing) and emitted late: caught up (at the leader's LEO), dated
    before an event emitted ahead of them but after their partition's previous event (a held repeat goes before its
    partition's next event). Its watermark does not wait for them (agent/README.md)."""
    held, emitted, last = set(), -1, {}
    for i, ev in enumerate(stream):
        key = (ev.get("topic"), ev.get("partition"))
        if ev["type"] == "fetch" and ev["fetch_offset"] == ev["leader_leo"] and last.get(key, -1) <= ev["ts"] < emitted:
            held.add(i)
        emitted = max(emitted, sort_ts(ev))
        last[key] = max(last.get(key, -1), sort_ts(ev))
    return held


def with_watermarks(stream: list[dict], rng: random.Random) -> list[tuple[int, dict]]:
    """(emitted at, event) of a broker's stream with the agent's watermarks: every `WATERMARK_EVERY_MS` of its
    emission time (the running latest sort time), one at the least `ts` of every later event but the held repeats,
    less a random slack."""
    held = held_repeats(stream)
    later = [0] * (len(stream) + 1)
    later[-1] = 2**62
    for i in range(len(stream) - 1, -1, -1):
        later[i] = later[i + 1] if i in held else min(later[i + 1], stream[i]["ts"])
    out: list[tuple[int, dict]] = []
    emitted, next_mark, last = -1, -1, -1
    for i, ev in enumerate(stream):
        emitted = max(emitted, sort_ts(ev))
        out.append((emitted, ev))
        mark = min(later[i + 1], emitted) - rng.randrange(0, 100)
        if emitted >= next_mark and i + 1 < len(stream) and mark > last:  # the agent's marks only advance
            out.append((emitted, {"type": "watermark", "ts": mark, "cluster": ev["cluster"], "broker": ev["broker"]}))
            next_mark, last = emitted + WATERMARK_EVERY_MS, mark
    return out


def interleaved(streams: dict[int, list[dict]], seed: int, silent: int | None = None) -> list[dict]:
    """The brokers' streams as the events topic delivers them: each broker's in its own order, each trailing its
    emission by its own delay (a random walk in [0, MAX_DELAY_MS]); `silent` stops half-way through the recording."""
    rng = random.Random(seed)
    start = min(ev["ts"] for evs in streams.values() for ev in evs)
    end = max(ev["ts"] for evs in streams.values() for ev in evs)
    delivered: list[tuple[int, int, int, dict]] = []
    for broker, stream in streams.items():
        delay, last = rng.randrange(MAX_DELAY_MS), -1
        for i, (emitted, ev) in enumerate(with_watermarks(stream, rng)):
            if broker == silent and emitted > (start + end) // 2:
                break
            delay = min(MAX_DELAY_MS, max(0, delay + rng.randrange(-150, 151)))
            last = max(last, emitted + delay)
            delivered.append((last, broker, i, ev))
    delivered.sort(key=lambda item: item[:3])
    return [ev for *_, ev in delivered]


def encoded(events: list[dict]) -> list[bytes]:
    return [json.dumps(ev).encode() for ev in events]


def cuts(count: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return sorted(rng.sample(range(1, count), rng.randrange(20, 120)))


def outputs(result: ReplayResult) -> dict[str, list[str]]:
    rows = {
        "decisions": result.decisions,
        "propagations": result.propagations,
        "alter_partitions": result.alter_partitions,
        "observed": result.observed,
        "divergences": result.divergences,
        "records": result.records,
    }
    return {name: sorted(msgspec.json.encode(r).decode() for r in found) for name, found in rows.items()}


@pytest.mark.parametrize("mode", sorted(RECORDINGS))
@pytest.mark.parametrize(("seed", "silent"), [(1, None), (2, 3), (3, 2), (4, 1)])
def test_brokers_at_random_paces_and_any_cut_give_the_replay(mode: str, seed: int, silent: int | None) -> None:
    """Whatever the cuts and the brokers' paces, with leadership moves and a broker that goes silent half-way: the
    stream's outputs equal a one-pass replay of the same events, and no event is late."""
    data, config = RECORDINGS[mode]
    lines = encoded(interleaved(broker_streams(data), seed, silent))
    streamed = run_stateful(lines, cuts(len(lines), seed), config)
    replayed = replay([lines], config)
    assert [d.to_record() for d in streamed.dead_letters] == []
    assert outputs(streamed) == outputs(replayed)
    assert len(replayed.decisions) >= 5


@pytest.mark.parametrize("buckets", [4, 16])
@pytest.mark.parametrize("mode", sorted(RECORDINGS))
def test_watermarks_settle_what_the_lateness_wait_held_back(mode: str, buckets: int) -> None:
    """Live (no end of input to apply what waits): with the brokers' watermarks the micro-batches settle up to where
    every broker's stream has passed, well past `allowed_lateness_ms` behind the newest event, where the same stream
    without watermarks stops; and what they settled is the replay's, up to there. (The ZooKeeper recording's broker 2
    falls silent 9 s before the end, a stall by `broker_stall_wait_ms`, so the stall wait is cut to the lateness
    here: the test on stalls is `test_stalls.py`.)"""
    data, config = RECORDINGS[mode]
    config = replace(config, broker_stall_wait_ms=config.allowed_lateness_ms)
    events = interleaved(broker_streams(data), seed=5)
    plain = [ev for ev in events if ev["type"] != "watermark"]
    at = cuts(len(events), 5)
    marked = run_stateful(encoded(events), at, config, buckets=buckets, finish=False)
    plain_at = [round(c * len(plain) / len(events)) for c in at]
    fallback = run_stateful(encoded(plain), plain_at, config, buckets=buckets, finish=False)
    newest = max(ev["ts"] for ev in plain)
    assert fallback.watermark is not None and fallback.watermark <= newest - config.allowed_lateness_ms + 1
    assert marked.watermark is not None and marked.watermark > newest - config.allowed_lateness_ms + 1000
    assert len(marked.decisions) >= len(fallback.decisions)
    replayed = replay([encoded(plain)], config, until=marked.watermark - 1)
    assert sorted(msgspec.json.encode(d).decode() for d in marked.decisions) == sorted(
        msgspec.json.encode(d).decode() for d in replayed.decisions
    )


def test_the_frontier_follows_the_slowest_broker_that_has_not_fallen_behind() -> None:
    """`cluster_frontier`: the least broker stream; a broker that fell `broker_stall_wait_ms` behind (here as short as
    `allowed_lateness_ms`) holds nothing back; a source without watermarks (a reporter without one, an event without
    a broker) keeps the lateness wait."""
    marks, brokers = {1: 10_000, 2: 9_000, 3: 9_500}, {1, 2, 3}

    def frontier(
        newest: int,
        reporters: set[int] = brokers,
        named: set[int] = brokers,
        unbounded: bool = False,
        wait: int = 5000,
        **given: dict,
    ) -> int:
        return cluster_frontier(newest, 5000, wait, 1000, given.get("marks", marks), reporters, named, unbounded)

    assert frontier(10_000) == frontier(13_000) == 8_999  # broker 2's stream, ahead of the fallback
    assert frontier(14_500) == 9_500  # 2 and 3 fell behind (away): 1 holds it back, less the margin, to the fallback
    assert frontier(16_000) == 11_000  # all behind: the fallback
    assert frontier(10_000, named={1, 2, 3, 4}) == 7_999  # 4 is named but sent no watermark yet: the margin
    assert frontier(10_000, reporters={1, 2, 3, 4}) == 5_000  # 4 sends events but no watermarks: the fallback
    assert frontier(10_000, unbounded=True) == 5_000  # an event without a broker: the fallback
    assert frontier(10_000, marks={}) == 5_000
    assert brokers_frontier({}, (), 7, 7, 1000) == 7
    # A stalled broker holds back for `broker_stall_wait_ms`, behind the lateness fallback: its events still to come
    assert frontier(14_500, wait=8000) == frontier(16_000, wait=8000) == 8_999  # 6_500, 8_000: all three hold back
    assert frontier(17_500, wait=8000) == 9_500  # 2, 3 gone: 1 holds it back less the margin, to the wait's bound
    assert frontier(18_000, wait=8000) == 13_000  # none holds back: the fallback


def test_without_the_rejoin_margin_a_starting_broker_finds_the_frontier_past_it() -> None:
    """Why the margin: broker 3 starts reporting up to MAX_DELAY_MS behind the others; with no margin for a broker
    the metadata names but that sent no watermark yet, the others' streams move the frontier past its first events,
    and they are late. With the margin (the test above, same input), nothing is."""
    data, config = RECORDINGS["kraft"]
    lines = encoded(interleaved(broker_streams(data), 4, silent=1))
    streamed = run_stateful(lines, cuts(len(lines), 4), replace(config, broker_rejoin_margin_ms=0))
    late = streamed.dead_letters
    assert late and all(json.loads(d.raw)["broker"] == 3 and d.category == "late" for d in late)


def test_held_repeats_behind_the_frontier_are_applied_as_the_replay_applied_them() -> None:
    """The agent's watermark does not wait for the caught-up repeats it holds: many arrive after every broker's
    watermark passed them, behind the frontier. Each is taken (`caught_up_repeat`), none is late, and the outputs,
    records included (each repeat's lastCaughtUpTimeMs), are the replay's. (The ZooKeeper recording: its brokers held
    repeats up to 480 ms; the KRaft one's for 1-40 ms, rarely behind anything.)"""
    data, config = RECORDINGS["zookeeper"]
    streams = broker_streams(data)
    repeats = {json.dumps(stream[i]) for stream in streams.values() for i in held_repeats(stream)}
    events = interleaved(streams, seed=8)
    marks: dict[int, int] = {}
    behind = 0
    for ev in events:
        if ev["type"] == "watermark":
            marks[ev["broker"]] = ev["ts"]
        elif json.dumps(ev) in repeats and len(marks) == len(streams) and min(marks.values()) > ev["ts"]:
            behind += 1
    assert behind >= 5
    lines = encoded(events)
    streamed = run_stateful(lines, cuts(len(lines), 8), config)
    assert streamed.dead_letters == []
    assert outputs(streamed) == outputs(replay([lines], config))


def test_a_key_that_no_longer_lists_a_cluster_holds_it_back_no_more() -> None:
    """A key with no partitions of a cluster lists it only while it has that cluster's events pending; once applied,
    its last frontier must not hold the cluster back (with each broker's own stream time most calls have none)."""
    frontiers = Frontiers()
    frontiers.report(0, {"lab": 1_000})
    frontiers.report(13, {"lab": 700, "other": 50})
    assert frontiers.settled() == {"lab": 700, "other": 50}
    frontiers.report(0, {"lab": 2_000})
    frontiers.report(13, {"other": 60})  # its "lab" events applied: it can no longer change "lab"
    assert frontiers.settled() == {"lab": 2_000, "other": 60}
    frontiers.report(13, {})
    assert frontiers.settled() == {"lab": 2_000}


def delivered_behind(streams: dict[int, list[dict]], slow: int, delay_ms: int) -> list[dict]:
    """The brokers' streams with their watermarks, delivered as emitted, but `slow`'s `delay_ms` behind the others (a
    broker that just resumed, its agent catching up)."""
    rng = random.Random(7)
    delivered = [
        (emitted + (delay_ms if broker == slow else 0), broker, i, ev)
        for broker, stream in streams.items()
        for i, (emitted, ev) in enumerate(with_watermarks(stream, rng))
    ]
    delivered.sort(key=lambda item: item[:3])
    return [ev for *_, ev in delivered]


@pytest.mark.parametrize("mode", sorted(RECORDINGS))
def test_a_broker_behind_the_others_holds_back_only_the_partitions_it_acts_on(mode: str) -> None:
    """Live, with one broker's stream 1.5 s behind the others': the partitions it does not act on (not their leader,
    ISR or ELR: the leaders' expands of it, as it comes back) are applied past the cluster's frontier (the slow
    stream's), so their decisions come out in a micro-batch whose frontier has not reached them; and the whole
    stream, finished, is the replay, with nothing late."""
    data, config = RECORDINGS[mode]
    streams = broker_streams(data)
    early: list[tuple[int, str, int]] = []

    def before_the_frontier(settled: Settled) -> None:
        frontier = settled.watermark if settled.watermark is not None else -1
        early.extend((d.ts, str(d.kind), d.partition) for d in settled.decisions if d.ts >= frontier)

    for slow in (1, 2, 3):
        lines = encoded(delivered_behind(streams, slow, 1500))
        at = list(range(40, len(lines), 40))
        streamed = run_stateful(lines, at, config, each_batch=before_the_frontier)
        replayed = replay([lines], config)
        assert [d.to_record() for d in streamed.dead_letters] == []
        assert outputs(streamed) == outputs(replayed)
    assert early, "no partition went past its cluster's frontier"
