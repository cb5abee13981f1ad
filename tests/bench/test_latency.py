"""`isrwatch bench latency`: its options, and how it matches the brokers' ISR writes with what the API showed.

The lab run itself is a benchmark (it prints numbers); these tests cover its pure parts on real agent events.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from isrwatch.bench.latency import (
    Batch,
    BrokerWrite,
    Parts,
    Report,
    Seen,
    Shown,
    match,
    parse_args,
    parse_duration,
    percentile,
    split,
)
from isrwatch.cli import build_parser

AGENT_DATA = Path(__file__).parents[1] / "agent" / "data"
WITHIN_MS = 20_000  # how long the run awaits a write
WINDOW_MS = 2_500  # how far from a write the model's decision of it may be


def recorded_writes() -> list[BrokerWrite]:
    """Every isr_updated the agent recorded on the lab (tests/agent/data), in the brokers' order."""
    writes = [
        BrokerWrite.from_event(ev)
        for path in sorted(AGENT_DATA.glob("broker*.events.jsonl"))
        for ev in map(json.loads, path.read_text().splitlines())
        if ev["type"] == "isr_updated"
    ]
    return sorted(writes, key=lambda w: w.ts)


def test_durations() -> None:
    assert [parse_duration(t) for t in ("1s", "5s", "500ms", "2.5", " 3 s ")] == [1.0, 5.0, 0.5, 2.5, 3.0]
    for bad in ("0s", "-1s", "1m", "s", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="positive duration"):
            parse_duration(bad)


def test_defaults_and_options() -> None:
    args = parse_args([])
    assert (args.trigger, args.faults, args.brokers, args.lag_ms, args.stall, args.poll_ms, args.dir) == (
        [1.0, 5.0],
        10,
        3,
        5000,
        10.0,
        50,
        None,
    )
    args = parse_args(
        ["--trigger", "1s", "5s", "--faults", "4", "--dir", "/tmp/x", "--brokers", "4", "--lag-ms", "6000"]
    )
    assert (args.trigger, args.faults, args.dir, args.brokers, args.lag_ms) == ([1.0, 5.0], 4, Path("/tmp/x"), 4, 6000)
    assert args.watermark_interval_ms == 200 and parse_args(["--watermark-interval-ms", "0"]).watermark_interval_ms == 0


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--faults", "0"], "--faults 0: must be >= 1"),
        (["--brokers", "2"], "--brokers 2: must be 3..9"),
        (["--lag-ms", "100"], "--lag-ms 100: must be >= 500"),
        (["--stall", "8"], "--stall 8: must be >= 1.5 x --lag-ms + 1 s = 8.5 s"),
        (["--lag-ms", "8000", "--stall", "12"], "--stall 12: must be >= 1.5 x --lag-ms + 1 s = 13 s"),
        (["--stall", "13"], "--stall 13: must be <= 12 s"),
        (["--trigger", "1s", "1000ms"], "--trigger: a value is given twice"),
        (["--trigger", "fast"], "'fast': expected a positive duration"),
        (["--watermark-interval-ms", "-1"], "--watermark-interval-ms -1: must be 0..60000"),
    ],
)
def test_bad_options_are_named(argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_args(argv)
    assert exit_.value.code == 2
    assert says in capsys.readouterr().err


def test_isrwatch_bench_reaches_it(capsys: pytest.CaptureFixture[str]) -> None:
    """`isrwatch bench latency ...` hands its options to this benchmark (checked before any lab starts)."""
    args = build_parser().parse_args(["bench", "latency", "--faults", "0"])
    with pytest.raises(SystemExit):
        args.func(args)
    assert "isrwatch bench latency: error: --faults 0" in capsys.readouterr().err


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(100, 0, -1)]  # 1..100, unordered
    assert (percentile(values, 50), percentile(values, 99), percentile(values, 100)) == (50.0, 99.0, 100.0)
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([7.0], 99) == 7.0
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0], 99) == 10.0
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
    with pytest.raises(ValueError, match="must be in"):
        percentile([1.0], 0)


def test_writes_from_the_agent_recording() -> None:
    writes = recorded_writes()
    assert len(writes) >= 4 and {w.kind for w in writes} == {"shrink", "expand"}
    first = writes[0]
    assert first.isr == tuple(sorted(first.isr)) and first.partition_epoch >= 1 and first.ts > 1_700_000_000_000


def test_match_by_the_models_decision() -> None:
    """Each write is seen when the API's history first holds the model's decision of it (same partition, kind and
    ISR, nearest in time within the window): with its ISR, or superseded by a later decision of the partition that
    came in the same batch, or never."""
    shrink = BrokerWrite(1, "orders", 0, ts=10_000, partition_epoch=1, isr=(1, 2), kind="shrink")
    expand = BrokerWrite(1, "orders", 0, ts=10_400, partition_epoch=2, isr=(1, 2, 3), kind="expand")
    other = BrokerWrite(2, "orders", 1, ts=11_000, partition_epoch=5, isr=(2, 3), kind="shrink")
    lost = BrokerWrite(3, "payments", 0, ts=12_000, partition_epoch=3, isr=(3,), kind="shrink")
    later = BrokerWrite(1, "orders", 0, ts=20_000, partition_epoch=3, isr=(1, 2), kind="shrink")
    shown = [
        Shown(16_100, "orders", 0, "shrink", ts=9_990, isr=(1, 2)),  # both of orders-0's writes in one batch
        Shown(16_100, "orders", 0, "expand", ts=10_395, isr=(1, 2, 3)),
        Shown(16_500, "orders", 1, "shrink", ts=8_400, isr=(2, 3)),  # 2.6 s before the write: another decision
        Shown(17_000, "orders", 1, "shrink", ts=10_900, isr=(2, 3)),
        Shown(17_200, "orders", 1, "shrink", ts=10_950, isr=(1, 2, 3)),  # another ISR, in the next batch
        Shown(17_500, "payments", 0, "expand", ts=12_000, isr=(3,)),  # another kind
        Shown(18_000, "payments", 1, "shrink", ts=12_000, isr=(3,)),  # another partition
        Shown(25_900, "orders", 0, "shrink", ts=19_998, isr=(1, 2)),
    ]
    assert match([shrink, expand, other, lost, later], shown, WINDOW_MS, WITHIN_MS) == [
        Seen(shrink, "superseded", 16_100, -10),
        Seen(expand, "as_written", 16_100, -5),
        Seen(other, "as_written", 17_000, -100),
        Seen(lost, "unseen"),
        Seen(later, "as_written", 25_900, -2),
    ]
    assert [s.latency_ms for s in match([shrink, lost, later], shown, WINDOW_MS, WITHIN_MS)] == [6_100, None, 5_900]
    assert match([later], shown, WINDOW_MS, 5_000) == [Seen(later, "unseen")]  # not shown within 5 s
    assert match([later], shown, 1, WITHIN_MS) == [Seen(later, "unseen")]  # the decision is 2 ms away


def test_match_on_recorded_writes() -> None:
    """The API showing, 6 s after each recorded write, the model's decision of it 7 ms earlier: each is seen as
    written 6 s after its ts, whatever the partition epochs."""
    writes = recorded_writes()
    shown = [Shown(w.ts + 6_000 + i, w.topic, w.partition, w.kind, w.ts - 7, w.isr) for i, w in enumerate(writes)]
    seen = match(writes, shown, WINDOW_MS, WITHIN_MS)
    assert [s.how for s in seen] == ["as_written"] * len(writes)
    assert [(s.latency_ms, s.model_offset_ms) for s in seen] == [(6_000 + i, -7) for i in range(len(writes))]


def test_report_lines() -> None:
    """What the run prints per trigger: counts, percentiles, the latency's parts and its bounds."""
    writes = [
        BrokerWrite(1, "orders", p, ts=10_000 + p, partition_epoch=1, isr=(1, 2), kind="shrink") for p in range(4)
    ]
    seen = [Seen(w, "as_written", w.ts + 6_000 + 100 * i, -i) for i, w in enumerate(writes)]
    batches = [Batch(3, started_ms=15_500, duration_ms=400, committed_ms=15_950, watermark_ms=10_500)]
    report = Report(1.0, [*seen, Seen(writes[0], "unseen")], batches, 50, [10.0, 12.0], {"timing": 2})
    lines = report.lines()
    assert lines[0] == (
        "trigger 1 s: 5 ISR writes (5 shrinks, 0 expands); the API showed 4 with their ISR, 0 only superseded by "
        "the partition's next write in the same batch, 1 never; divergences meanwhile: timing 2"
    )
    assert "p50 -2 ms, min -3 ms, max 0 ms" in lines[1]
    assert "p50 6.10 s, p99 6.30 s, max 6.30 s, min 6.00 s over 4 writes" in lines[2]
    assert "batch start -> commit p50 0.45 s" in lines[3]
    # The frontier trailed the batch's start by 5 s (15.5 - 10.5): the bound is that + 1 s + 0.4 s + 0.05 s.
    assert "trailed its start by p50 5.00 s, p99 5.00 s, max 5.00 s" in lines[4]
    assert "poll (<= 50 ms): at most 6.5 s at the cluster frontier's p99" in lines[4]


def test_split_at_the_batch_that_committed_it() -> None:
    write = BrokerWrite(1, "orders", 0, ts=10_000, partition_epoch=1, isr=(1, 2), kind="shrink")
    batches = [
        Batch(7, started_ms=14_000, duration_ms=900, committed_ms=14_850, watermark_ms=9_000),
        Batch(8, started_ms=15_000, duration_ms=1_200, committed_ms=16_150, watermark_ms=10_000),
        Batch(9, started_ms=16_000, duration_ms=800, committed_ms=16_750, watermark_ms=11_000),
    ]
    assert split(Seen(write, "as_written", 16_180), batches) == Parts(to_start_ms=5_000, batch_ms=1_150, to_poll_ms=30)
    assert split(Seen(write, "unseen"), batches) is None
    assert split(Seen(write, "as_written", 14_000), batches) is None  # before any commit: no batch to blame


def test_bound_when_batches_outlast_the_trigger() -> None:
    """A batch longer than the trigger delays the next one: the wait is bounded by the batch, and the poll by the
    slowest poll round."""
    write = BrokerWrite(1, "orders", 0, ts=10_000, partition_epoch=1, isr=(1, 2), kind="shrink")
    batches = [Batch(5, started_ms=15_000, duration_ms=3_000, committed_ms=17_900, watermark_ms=10_000)]
    line = Report(1.0, [Seen(write, "as_written", 17_950, -5)], batches, 50, [30.0, 80.0], {}).lines()[-1]
    assert line.endswith("the poll (<= 80 ms): at most 11.1 s at the cluster frontier's p99")
