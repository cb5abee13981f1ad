"""Framing: lines, their seq and arrival, where each goes (a bucket, every bucket, control), packed per key."""

from __future__ import annotations

import json
from collections import Counter
from typing import NamedTuple

import pyarrow as pa
import pytest

from isrwatch.state.eventtime import Role
from isrwatch.streaming.buckets import CONTROL_KEY, Layout, bucket_ids
from isrwatch.streaming.framing import (
    BEACON_SHARE,
    Lines,
    beacon_every,
    binary_array,
    frame,
    frame_batches,
    pack,
    route,
    unpack,
)

LAYOUT = Layout.create(16, 2)
IDS = list(LAYOUT.ids)
SOURCE = "value binary, origin string, part int, offset long, received long"
BEACON_EVERY = beacon_every(len(IDS))


class Routed(NamedTuple):
    bucket: int
    raw: bytes
    seq: int
    arrival: int
    role: int
    received: int | None


def flatten(packed: list[tuple[int, bytes]]) -> list[Routed]:
    """One row per line a key received, from the framer's packed rows."""
    out = []
    for bucket, data in packed:
        out.extend(Routed(bucket, *line) for line in unpack(data).lines())
    return out


def framed(spark, rows: list[tuple], ranks: dict[str, int] | None = None, until: int | None = None) -> list[Routed]:
    raw = spark.createDataFrame([(*row, 1_000) for row in rows], SOURCE)
    return flatten([(r.bucket, r.data) for r in frame(raw, LAYOUT, ranks, until).collect()])


def in_python(text: str, name: str = "f") -> list[Routed]:
    packed = route(Lines.of_file(text.encode(), 1_000, 7), IDS)
    return flatten([(bucket, pack(routed)) for bucket, routed in packed.items()])


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
    by_line: dict[int, list[Routed]] = {}
    for r in rows:
        by_line.setdefault(r.seq, []).append(r)
    assert sorted(by_line) == [1, 4, 5, 6]  # blank and whitespace-only lines are not input
    assert all(r.arrival == (3 << 32) | r.seq and r.received == 1_000 for r in rows)
    [first] = [r for r in by_line[1] if r.role == Role.EVENT]
    [last] = [r for r in by_line[6] if r.role == Role.EVENT]
    assert first.bucket == last.bucket in LAYOUT.ids and last.raw.endswith(b"\r")
    assert sorted(r.bucket for r in by_line[4]) == sorted(LAYOUT.ids) and {r.role for r in by_line[4]} == {Role.TICK}
    [bad] = by_line[5]
    assert (bad.bucket, bad.role, bad.raw) == (CONTROL_KEY, Role.EVENT, b"{oops")
    # Line 1 (seq 1 of every BEACON_EVERY) and the file's last line also tell every other bucket their time.
    for line in (1, 6):
        beacons = [r for r in by_line[line] if r.role == Role.BEACON]
        assert sorted(r.bucket for r in beacons) == sorted(set(LAYOUT.ids) - {first.bucket})


def test_an_event_makes_the_same_share_of_beacon_copies_whatever_the_bucket_count():
    """Time reaches every key at a cost per event that does not grow with the keys (SPEC §6)."""
    text = ("\n".join(fetch(t, partition=t % 997) for t in range(1, 40_001)) + "\n").encode()
    for buckets in (16, 256, 1024):
        routed = route(Lines.of_file(text, 1_000, 7), bucket_ids(buckets, 2))
        copies = sum(r.role.count(Role.BEACON) for r in routed.values())
        assert copies <= 40_000 / BEACON_SHARE + 2 * buckets  # sampled (one more, rounding up), the last line


def test_each_kafka_partitions_last_record_in_a_source_batch_is_a_beacon():
    records = [fetch(t, partition=t) for t in range(1, 6)]
    batch = pa.RecordBatch.from_pydict(
        {
            "value": [r.encode() for r in records],
            "origin": ["events"] * 5,
            "part": [0, 0, 1, 1, 1],
            "offset": [2, 3, 2, 3, 4],
            "received": [1_000] * 5,
        }
    )
    lines = Lines.of_records(batch)
    assert lines.last.tolist() == [False, True, False, False, True]


def test_one_event_in_beacon_every_is_also_a_beacon():
    rows = in_python("\n".join(fetch(t, partition=t % 7) for t in range(1, 2 * BEACON_EVERY + 10)) + "\n")
    beacons = {r.seq for r in rows if r.role == Role.BEACON}
    assert beacons == {1, BEACON_EVERY + 1, 2 * BEACON_EVERY + 1, 2 * BEACON_EVERY + 9}  # the last is the file's last
    assert len([r for r in rows if r.role == Role.EVENT]) == 2 * BEACON_EVERY + 9


@pytest.mark.parametrize("ending", ["", "\n", "\n\n \n"], ids=["no final newline", "final newline", "blank tail"])
def test_only_the_files_last_line_is_a_beacon_whatever_follows_it(ending):
    # seqs 2..4 are no BEACON_EVERY beacon: a beacon among them could only be the last line's
    rows = in_python("\n".join(fetch(t, partition=t) for t in range(1, 5)) + ending)
    assert {r.seq for r in rows if r.role == Role.BEACON} == {1, 4}


def test_a_byte_order_mark_is_no_data_but_stays_in_the_line():
    [event] = [r for r in in_python("\ufeff" + fetch(3) + "\n") if r.role == Role.EVENT]
    assert event.bucket != CONTROL_KEY and event.raw.startswith(b"\xef\xbb\xbf")


def test_kafka_records_take_their_offset_as_seq_and_lines_without_time_or_key_go_to_control(spark):
    records = [
        fetch(5).encode(),
        json.dumps({"type": "fetch", "ts": -1}).encode(),
        json.dumps({"type": "append", "ts": 7, "partition": 1}).encode(),
        fetch(9).encode(),
        json.dumps({"type": "fetch", "ts": "5", "topic": "t", "partition": 0}).encode(),
    ]
    rows = framed(spark, [(v, "events", 2, 40 + i) for i, v in enumerate(records)], until=8)
    assert sorted(r.seq for r in rows) == [40, 41, 42, 43, 44]
    control = {r.seq for r in rows if r.bucket == CONTROL_KEY}
    assert control == {41, 42, 43, 44}  # 43 is after --until
    assert len({r.arrival for r in rows}) == 5


def test_every_input_line_is_counted_once_and_a_tombstone_is_no_input():
    text = "\n".join([fetch(1), json.dumps({"type": "tick", "ts": 2}), "", "{oops"]) + "\n"
    source = pa.RecordBatch.from_pydict(
        {
            "value": [text.encode(), None, fetch(3).encode()],
            "origin": ["f", "events", "events"],
            "part": [-1, 0, 0],
            "offset": [-1, 7, 8],
            "received": [1, 2, 3],
        }
    )
    read, *outs = frame_batches(iter([source]), IDS, None, None)  # what was read, the file's rows, the records'
    # Read of Kafka: both records (the tombstone too, it has its offset), from offset 7; no input lines.
    assert read.column("read").to_pylist() == ["events:0:2:7"] and read.column("lines").to_pylist() == [0]
    assert [sum(out.column("lines").to_pylist()) for out in outs] == [3, 1]  # a tombstone is no input
    assert all(out.column("read").null_count == out.num_rows for out in outs)
    rows = flatten(
        [
            (b, d)
            for out in outs
            for b, d in zip(out.column("bucket").to_pylist(), out.column("data").to_pylist(), strict=True)
        ]
    )
    assert sorted(r.seq for r in rows if r.role == Role.EVENT) == [1, 4, 8]  # line 3 is blank
    assert Counter(r.role for r in rows)[Role.TICK] == len(IDS)


def test_partitions_spread_over_every_bucket():
    lines = "\n".join(fetch(1, partition=p, cluster=f"c{p % 3}") for p in range(3000))
    counts = Counter(r.bucket for r in in_python(lines) if r.role == Role.EVENT)
    assert sorted(counts) == sorted(LAYOUT.ids) and max(counts.values()) < 1.3 * min(counts.values())


@pytest.mark.parametrize(
    "values", [[b"a", None, b"", b"bc"], [], [None], [b"x" * 100] * 3, [None] * 9 + [b"q"]], ids=repr
)
def test_binary_array_holds_the_values_and_nulls_pyarrow_would(values):
    array = binary_array(values)
    array.validate(full=True)
    assert array.type == pa.binary() and array.equals(pa.array(values, pa.binary())) and array.to_pylist() == values
