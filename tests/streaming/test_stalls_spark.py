"""Exact when a broker stalls, through the real Spark query (`isrwatch replay --engine spark`, SPEC §6): the stalled
broker's last events, captured before it stopped, reach the job micro-batches after the other brokers moved on and are
applied in their place; the query's outputs are the one-pass replay's, and nothing is late (the input:
tests/stalls.py; the same input without the stall wait: tests/state/test_stalls.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from isrwatch.state.replay import replay
from isrwatch.streaming.replay_spark import replay_spark
from tests.support.stalls import CONFIG, outputs, stall_lines

pytestmark = pytest.mark.spark


def test_a_stalled_brokers_last_events_a_few_batches_late_are_applied_by_the_spark_query(spark, tmp_path: Path):
    lines = stall_lines(stalled=2, stall_ms=9000, caught=500, seed=7)
    size = -(-len(lines) // 8)  # eight micro-batches: the stall spans several
    paths = []
    for i in range(0, len(lines), size):
        path = tmp_path / f"events-{i:05d}.jsonl"
        path.write_bytes(b"".join(line + b"\n" for line in lines[i : i + size]))
        paths.append(path)
    streamed = replay_spark(paths, CONFIG, buckets=4)
    assert [d.to_record() for d in streamed.dead_letters] == []
    replayed = replay([lines], CONFIG)
    assert outputs(streamed) == outputs(replayed)
    assert any(d.kind == "shrink" for d in replayed.decisions)  # the stall shrank the stalled broker
