"""The streaming job run as the tests run it: its command, its output read back, and the replay it must equal."""

from __future__ import annotations

import contextlib
import json
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import msgspec

from isrwatch.state.config import Config
from isrwatch.state.replay import ReplayResult, replay
from isrwatch.store import Page, open_store
from isrwatch.streaming.job import JobOptions, StreamJob
from tests.support.state import canonical

CONFIG = Config(replica_lag_time_max_ms=10_000, allowed_lateness_ms=3000)


def drain(read: Callable[..., Page]) -> list[dict]:
    items, after = [], None
    while True:
        page = read(after=after, limit=1000)
        items += page.items
        if page.next_key is None:
            return items
        after = page.next_key


def dump(url: str) -> dict:
    """Everything the job wrote that must not depend on how the input fell into micro-batches."""
    with open_store(url) as store:
        return {
            "decisions": canonical(drain(store.decisions)),
            "propagations": canonical(drain(store.propagations)),
            "partitions": drain(store.partitions),
            "dead_letters": canonical(drain(store.dead_letters)),
            "brokers": store.broker_propagation(),
            # Input rows are tallied from Spark's progress, which a killed job may not have reported.
            "tallies": [t for t in store.tallies() if t[0] != "stream_input_rows"],
            "watermark": store.stream_position().watermark_ms,
        }


def local(paths: list[Path], until: int) -> ReplayResult:
    with contextlib.ExitStack() as stack:
        return replay([stack.enter_context(open(p, "rb")) for p in paths], CONFIG, until)


def run_job(
    source: Path | str,
    store: str,
    checkpoint: Path | str,
    config: Config = CONFIG,
    max_per_batch: int | None = 1,
    echo: Callable[[str], None] | None = None,
    **options,
) -> None:
    """`isrwatch run --available-now` in process: what `source` holds (a directory: a `files:` source) into `store`;
    `echo` hears what the job says."""
    StreamJob(
        JobOptions(
            source=f"files:{source}" if isinstance(source, Path) else source,
            store=store,
            checkpoint=str(checkpoint),
            config=config,
            available_now=True,
            max_per_batch=max_per_batch,
            **options,
        ),
        echo=echo,
    ).run()


def run_command(inbox: Path, store: str, checkpoint: Path, *options: str) -> list[str]:
    """`isrwatch run` over the `files:` directory `inbox`, as the command line of a job in its own process."""
    return [
        sys.executable,
        "-m",
        "isrwatch.cli",
        "run",
        "--source",
        f"files:{inbox}",
        "--store",
        store,
        "--checkpoint",
        str(checkpoint),
        *options,
    ]


@dataclass
class Settled:
    """The local replay's answer to what a store must hold, at the event times the store says it settled."""

    decisions: list[str]
    propagations: list[str]
    partitions: list
    brokers: list[dict]
    lowest: ReplayResult  # the replay up to the earliest of those times
    highest: ReplayResult  # and up to the latest


def replay_of(url: str, paths: list[Path], cluster: str | None = None) -> Settled:
    """Each partition replayed up to its record's as-of time, each cluster's propagation up to its frontier
    (only `cluster`'s, when given)."""
    with open_store(url) as store:
        as_of = {k: at for k, at in store.partition_as_of().items() if cluster in (None, k[0])}
        frontiers = {c: at for c, at in store.event_time().clusters.items() if cluster in (None, c)}
    replays: dict[int, ReplayResult] = {}

    def at(time: int) -> ReplayResult:
        if time not in replays:
            replays[time] = local(paths, time - 1)
        return replays[time]

    decisions, partitions, propagations, brokers = [], [], [], []
    for key, time in sorted(as_of.items()):
        result = at(time)
        partitions += [p for p in result.records if (p.cluster, p.topic, p.partition) == key]
        decisions += [d for d in result.decisions if (d.cluster, d.topic, d.partition) == key]
    for cluster, time in sorted(frontiers.items()):
        result = at(time)
        propagations += [p for p in result.propagations if p.cluster == cluster]
        brokers += [b for b in result.brokers if b.cluster == cluster]
    times = sorted(replays)
    return Settled(
        canonical(decisions),
        canonical(propagations),
        partitions,
        msgspec.to_builtins(brokers),
        replays[times[0]],
        replays[times[-1]],
    )


def assert_store_is_the_replay(got: dict, expected: Settled) -> None:
    assert got["decisions"] == expected.decisions
    assert got["propagations"] == expected.propagations
    assert got["partitions"] == expected.partitions
    assert got["brokers"] == expected.brokers
    assert got["dead_letters"] == canonical(
        [
            {**d, "raw": d["raw"].rstrip("\n"), "ts": d.get("ts")}
            for d in (d.to_record() for d in expected.highest.dead_letters)
        ]
    )
    tallies = {(metric, json.dumps(labels, sort_keys=True)): value for metric, labels, value in got["tallies"]}

    def counted(name: str) -> dict[str, int]:
        return {json.loads(labels)["reason"]: int(v) for (m, labels), v in tallies.items() if m == name}

    assert counted("dead_letters") == expected.highest.summary["dead_letters_by_reason"]
    for name, key in (
        ("ignored_fetches", "ignored_fetches_by_reason"),
        ("ignored_appends", "ignored_appends_by_reason"),
    ):
        low, high, got_counts = expected.lowest.summary[key], expected.highest.summary[key], counted(name)
        assert set(got_counts) <= set(high), name
        assert all(low.get(reason, 0) <= n <= high[reason] for reason, n in got_counts.items()), name
    kinds = {json.loads(labels)["kind"]: 0 for (m, labels) in tallies if m == "decisions"}
    for (m, labels), v in tallies.items():
        if m == "decisions":
            kinds[json.loads(labels)["kind"]] += int(v)
    assert sum(kinds.values()) == len(expected.decisions)
    assert kinds == dict(Counter(json.loads(d)["kind"] for d in expected.decisions))
