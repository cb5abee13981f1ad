"""`isrwatch replay --engine spark` equals `--engine local` (SPEC §6): public scenarios and generated streams.

The generated streams (tests/support/streams.py) are cut into several files, one micro-batch
each, so buckets see their events in pieces, out of order within the lateness, and timeouts fire
between batches.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from isrwatch.cli import main
from isrwatch.state.config import Config
from isrwatch.state.events import DeadLetter
from isrwatch.state.replay import ReplayResult, replay
from isrwatch.streaming.replay_spark import replay_spark
from tests.support.state import append, canonical, fetch, lai
from tests.support.streams import START_MS, Mix, events, write_files

SCENARIOS = Path(__file__).parents[1] / "scenarios"


def local(paths: list[Path], config: Config, until: int | None = None) -> ReplayResult:
    with contextlib.ExitStack() as stack:
        return replay([stack.enter_context(open(p, "rb")) for p in paths], config, until)


def dead(rows: list[DeadLetter]) -> list[str]:
    return canonical([{**d, "raw": d["raw"].strip()} for d in (r.to_record() for r in rows)])


def assert_same(spark_run: ReplayResult, local_run: ReplayResult) -> None:
    assert canonical(spark_run.decisions) == canonical(local_run.decisions)
    assert canonical(spark_run.propagations) == canonical(local_run.propagations)
    assert spark_run.records == local_run.records
    assert spark_run.brokers == local_run.brokers
    assert canonical([i.to_record() for i in spark_run.incidents]) == canonical(
        [i.to_record() for i in local_run.incidents]
    )
    assert dead(spark_run.dead_letters) == dead(local_run.dead_letters)
    for key in (
        "lines",
        "events",
        "events_after_until",
        "until",
        "decisions_by_kind",
        "shrinks_by_reason",
        "propagations_by_trigger",
        "partitions",
        "ignored_fetches_by_reason",
        "ignored_appends_by_reason",
        "dead_letters_by_reason",
        "partitions_pending_propagation",
    ):
        assert spark_run.summary[key] == local_run.summary[key], key


@pytest.mark.parametrize("name", sorted(p.name.removesuffix(".events.jsonl") for p in SCENARIOS.glob("*.events.jsonl")))
def test_public_scenarios(spark, name):
    config = Config.from_dict(json.loads((SCENARIOS / f"{name}.config.json").read_text()))
    until = int((SCENARIOS / f"{name}.until").read_text())
    paths = [SCENARIOS / f"{name}.events.jsonl"]
    assert_same(replay_spark(paths, config, until), local(paths, config, until))


GENERATED = {
    "defaults": (Mix(), 6, Config(replica_lag_time_max_ms=10_000, allowed_lateness_ms=3000), None),
    "fast-schedules-until-midway": (
        Mix(partitions=200, events=30_000, seed=5, leader_changes=12),
        9,
        Config(
            replica_lag_time_max_ms=8000,
            isr_expiration_interval_ms=3000,
            isr_change_check_interval_ms=1000,
            isr_change_linger_ms=2000,
            isr_change_max_delay_ms=9000,
            schedule_origin_ms=START_MS + 333,
            min_insync_replicas=2,
            allowed_lateness_ms=3000,
        ),
        START_MS + 40_000,
    ),
}


@pytest.mark.parametrize("case", sorted(GENERATED))
def test_generated_streams_in_many_micro_batches(spark, tmp_path, case):
    mix, files, config, until = GENERATED[case]
    paths = write_files(events(mix), tmp_path / "in", files)
    spark_run = replay_spark(paths, config, until)
    local_run = local(paths, config, until)
    assert spark_run.summary["micro_batches"] >= files
    assert local_run.summary["decisions_by_kind"].get("shrink") and local_run.summary["decisions_by_kind"]["expand"]
    assert local_run.summary["propagations"] and local_run.summary["dead_letters"] >= mix.invalid // 2
    assert spark_run.summary["late_events"] == 0
    assert_same(spark_run, local_run)


def test_cli_writes_the_local_engines_files(spark, tmp_path):
    paths = write_files(events(Mix(partitions=40, events=4000, seed=2)), tmp_path / "in", 3)
    for engine in ("local", "spark"):
        assert (
            main(
                [
                    "replay",
                    *map(str, paths),
                    "--engine",
                    engine,
                    "--out",
                    str(tmp_path / engine),
                    "--set",
                    "replica_lag_time_max_ms=10000",
                    "--set",
                    "allowed_lateness_ms=3000",
                ]
            )
            == 0
        )
    for name in ("decisions", "propagations", "state"):
        rows = {
            engine: [json.loads(line) for line in (tmp_path / engine / f"{name}.jsonl").read_text().splitlines()]
            for engine in ("local", "spark")
        }
        assert canonical(rows["spark"]) == canonical(rows["local"]), name


@pytest.mark.parametrize("order", [("b", "a"), ("a", "b")])
def test_ties_on_time_and_line_number_follow_the_file_order(spark, tmp_path, order):
    """Two fetches at one time, both line 2 of their file: the later file's is applied last (its LEO stays)."""
    files = {
        "b": [lai(1000, 1, [1], [1, 2], 0, leader_leo=100), fetch(2000, 2, 50, 100)],
        "a": [append(1500, 100), fetch(2000, 2, 80, 100)],
    }
    paths = []
    for name in order:
        paths.append(tmp_path / f"{name}.jsonl")
        paths[-1].write_text("".join(json.dumps(ev) + "\n" for ev in files[name]))
    config = Config(replica_lag_time_max_ms=10_000)
    spark_run = replay_spark(paths, config, 3000)
    assert spark_run.records[0].followers[0].leo == (80 if order[-1] == "a" else 50)
    assert_same(spark_run, local(paths, config, 3000))
