"""Framing in Spark SQL: lines, their seq and arrival, and where each goes (a bucket, every bucket, control)."""

from __future__ import annotations

import json
from collections import Counter

from streaming.buckets import CONTROL_KEY, Layout
from streaming.framing import BEACON_EVERY, Role, frame

LAYOUT = Layout.create(16, 2)


def framed(spark, rows: list[tuple], ranks: dict[str, int] | None = None, until: int | None = None) -> list:
    raw = spark.createDataFrame(
        [(*row, 1_000) for row in rows], "value binary, origin string, part int, offset long, received long"
    )
    return frame(raw, LAYOUT, ranks, until).collect()


def fetch(ts: int, partition: int = 0, **extra) -> str:
    return json.dumps(
        {
            "type": "fetch",
            "ts": ts,
            "topic": "t",
            "partition": partition,
            "replica": 2,
            "fetch_offset": 1,
            "leader_leo": 2,
            **extra,
        }
    )


def test_a_file_is_cut_into_numbered_lines_routed_by_key(spark):
    text = "\n".join([fetch(10), "", "  \r", json.dumps({"type": "tick", "ts": 11}), "{oops", fetch(12) + "\r", ""])
    rows = framed(spark, [(text.encode(), "f.jsonl", -1, -1)], ranks={"f.jsonl": 3})
    by_line = {}
    for r in rows:
        by_line.setdefault(r.seq, []).append(r)
    assert sorted(by_line) == [1, 4, 5, 6]  # blank and whitespace-only lines are not input
    assert all(r.arrival == (3 << 32) | r.seq and r.received == 1_000 for r in rows)
    [first] = [r for r in by_line[1] if r.role == Role.EVENT]
    [last] = [r for r in by_line[6] if r.role == Role.EVENT]
    assert first.bucket == last.bucket in LAYOUT.ids and first.ts == 10 and last.raw.endswith(b"\r")
    assert sorted(r.bucket for r in by_line[4]) == sorted(LAYOUT.ids) and {r.role for r in by_line[4]} == {Role.TICK}
    [bad] = by_line[5]
    assert (bad.bucket, bad.ts, bad.role, bad.raw) == (CONTROL_KEY, None, Role.EVENT, b"{oops")
    # Line 1 (seq 1 of every BEACON_EVERY) and the file's last line also tell every other bucket their time.
    for line in (1, 6):
        beacons = [r for r in by_line[line] if r.role == Role.BEACON]
        assert sorted(r.bucket for r in beacons) == sorted(set(LAYOUT.ids) - {first.bucket})


def test_one_event_in_beacon_every_is_also_a_beacon(spark):
    lines = "\n".join(fetch(t, partition=t % 7) for t in range(1, 2 * BEACON_EVERY + 10)) + "\n"
    rows = framed(spark, [(lines.encode(), "f", -1, -1)])
    beacons = {r.seq for r in rows if r.role == Role.BEACON}
    assert beacons == {1, BEACON_EVERY + 1, 2 * BEACON_EVERY + 1, 2 * BEACON_EVERY + 9}  # the last is the file's last
    assert len([r for r in rows if r.role == Role.EVENT]) == 2 * BEACON_EVERY + 9


def test_kafka_records_take_their_offset_as_seq_and_lines_without_time_or_key_go_to_control(spark):
    records = [
        fetch(5).encode(),
        json.dumps({"type": "fetch", "ts": -1}).encode(),
        json.dumps({"type": "append", "ts": 7, "partition": 1}).encode(),
        fetch(9).encode(),
    ]
    rows = framed(spark, [(v, "events", 2, 40 + i) for i, v in enumerate(records)], until=8)
    assert [r.seq for r in rows] == [40, 41, 42, 43]
    assert [r.bucket == CONTROL_KEY for r in rows] == [False, True, True, True]  # the last one is after --until
    assert len({r.arrival for r in rows}) == 4


def test_partitions_spread_over_every_bucket(spark):
    lines = "\n".join(fetch(1, partition=p, cluster=f"c{p % 3}") for p in range(3000))
    counts = Counter(r.bucket for r in framed(spark, [(lines.encode(), "f", -1, -1)]) if r.role == Role.EVENT)
    assert sorted(counts) == sorted(LAYOUT.ids) and max(counts.values()) < 1.3 * min(counts.values())
