"""Event time per cluster, end to end through `isrwatch run` (SPEC §6).

Two clusters stream into one job, the second a minute behind the first — the normal shape of a
fleet in which one source lags — and one event of the first is dated a year ahead, from a broker
with a wrong clock. Each cluster must come out exactly as a replay of its own events alone; only
the future-dated event is a dead letter, and nothing is late. And a backfill of old files with one event a year
ahead (it passes the arrival guard): that event alone waits for a witness and is refused.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import msgspec

from isrwatch.sim.synthetic import StreamShape, generate
from isrwatch.state.config import Config
from isrwatch.store import open_store
from tests.support.jobs import dump, replay_of, run_job
from tests.support.state import canonical
from tests.support.streams import START_MS, in_order

CONFIG = Config(replica_lag_time_max_ms=10_000, allowed_lateness_ms=3000)
BEHIND_MS = 60_000
YEAR_MS = 365 * 86_400_000


def _cluster(name: str, start: int, seed: int) -> list[dict]:
    shape = StreamShape(
        partitions=24, brokers=4, topics=2, stuck_followers=2, slow_followers=2, start_ms=start, cluster=name
    )
    return list(generate(shape, 6000, seed))


def _run_files(tmp_path: Path, files: list[list[dict]], max_per_batch: int) -> tuple[str, dict]:
    """`isrwatch run` over these files (modification times in their order) into a new store: its URL and contents."""
    inbox = tmp_path / "in"
    inbox.mkdir()
    paths = []
    for n, events in enumerate(files):
        path = inbox / f"events-{n:04d}.jsonl"
        path.write_text("".join(json.dumps(ev) + "\n" for ev in events))
        paths.append(path)
    in_order(paths)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    run_job(inbox, url, tmp_path / "checkpoint", CONFIG, max_per_batch=max_per_batch)
    return url, dump(url)


def _only_refused(got: dict, event: dict) -> None:
    """`event` is the one dead letter, refused as ts_in_future, and nothing is late."""
    [dead] = [json.loads(d) for d in got["dead_letters"]]
    assert dead["reason"].startswith("ts_in_future") and (dead["field"], dead["ts"]) == ("ts", event["ts"])
    tallies = {(m, labels.get("reason")): v for m, labels, v in got["tallies"]}
    assert ("late_events", None) not in tallies and ("dead_letters", "late") not in tallies


def test_a_cluster_a_minute_behind_another_loses_nothing_and_a_future_event_moves_no_time(spark, tmp_path: Path):
    east = _cluster("east", START_MS + BEHIND_MS, 1)
    west = _cluster("west", START_MS, 2)  # the same minute of its own time arrives a minute later
    future = {**east[len(east) // 2], "ts": int(time.time() * 1000) + YEAR_MS}
    # Files of one second of arrival each: east's second t with west's second t - 60 s.
    seconds: dict[int, list[dict]] = {}
    for ev in east:
        seconds.setdefault((ev["ts"] - START_MS) // 1000, []).append(ev)
    for ev in west:
        seconds.setdefault((ev["ts"] - START_MS + BEHIND_MS) // 1000, []).append(ev)
    seconds[min(seconds) + 20].append(future)
    url, got = _run_files(tmp_path, [seconds[second] for second in sorted(seconds)], max_per_batch=8)
    _only_refused(got, future)
    with open_store(url) as store:
        frontiers = store.event_time().clusters
        decisions = msgspec.to_builtins(store.decisions(limit=100_000).items)
        propagations = msgspec.to_builtins(store.propagations(limit=100_000).items)
        partitions = msgspec.to_builtins(store.partitions(limit=100_000).items)
    # Each cluster's time is its own: east settles a minute ahead of west.
    assert frontiers["east"] - frontiers["west"] > BEHIND_MS - 5_000
    for name, own in (("east", east), ("west", west)):
        alone = tmp_path / f"{name}.jsonl"
        alone.write_text("".join(json.dumps(ev) + "\n" for ev in own))
        expected = replay_of(url, [alone], cluster=name)
        assert expected.propagations and [d for d in decisions if d["cluster"] == name and d["kind"] == "shrink"]
        assert canonical([d for d in decisions if d["cluster"] == name]) == expected.decisions
        assert canonical([p for p in propagations if p["cluster"] == name]) == expected.propagations
        assert [p for p in partitions if p["cluster"] == name] == msgspec.to_builtins(expected.partitions)


def test_a_backfill_of_old_files_with_one_event_a_year_ahead_refuses_that_event_alone(spark, tmp_path: Path):
    """Old files (every event older than its file, so a year ahead of 2023 still passes the arrival guard): the one
    event a year ahead waits for a witness, none comes while the cluster's time moves max_future_ms on, and it alone
    is a `ts_in_future` dead letter; nothing is late, and the cluster equals a replay without that line."""
    shape = StreamShape(partitions=12, brokers=4, topics=2, stuck_followers=2, slow_followers=2, start_ms=START_MS)
    events = list(generate(shape, 9000, 3))
    at = len(events) // 5
    wrong = {**events[at], "ts": events[at]["ts"] + YEAR_MS}
    assert wrong["ts"] < time.time() * 1000 and events[-1]["ts"] - wrong["ts"] + YEAR_MS > CONFIG.max_future_ms
    lines = events[:at] + [wrong] + events[at + 1 :]
    per = -(-len(lines) // 40)
    url, got = _run_files(tmp_path, [lines[n : n + per] for n in range(0, len(lines), per)], max_per_batch=4)
    _only_refused(got, wrong)
    rest = tmp_path / "rest.jsonl"
    rest.write_text("".join(json.dumps(ev) + "\n" for ev in events[:at] + events[at + 1 :]))
    expected = replay_of(url, [rest])
    assert expected.propagations and got["decisions"] == expected.decisions
    assert got["propagations"] == expected.propagations
