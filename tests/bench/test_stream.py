"""`isrwatch bench stream`: a small backlog run end to end (real Spark), the figures it prints."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.spark


def test_a_backlog_run_prints_the_ratio_against_the_replay_and_cpu_per_event(tmp_path):
    args = ["--events", "40000", "--partitions", "300", "--files", "4", "--files-per-batch", "1", "--warmup", "1"]
    done = subprocess.run(
        [sys.executable, "-m", "isrwatch.cli", "bench", "stream", *args, "--keep", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert re.search(r"^local: .* events/s replay", out, re.M), out
    # Batch 0 is the warm-up left out and batch 1 the window's start: the events counted are those of batches 2...
    stream = re.search(
        r"^stream: +[\d,]+ events/s sustained \(([\d,]+) events in batches (\d+)\.\.\d+, after 1 warm-up", out, re.M
    )
    assert stream and stream[2] == "2" and int(stream[1].replace(",", "")) > 10_000, out
    cpu = re.search(r"^cpu: +([\d.]+) us per event = ([\d.]+) driver \+ ([\d.]+) jvm \+ ([\d.]+) workers", out, re.M)
    assert cpu and abs(float(cpu[1]) - sum(map(float, cpu.groups()[1:]))) < 0.05, out
    ratios = re.findall(r"^ratio: +([\d.]+) stream/replay on (the wall clock|CPU time)", out, re.M)
    assert [kind for _, kind in ratios] == ["the wall clock", "CPU time"] and all(float(r) > 0 for r, _ in ratios), out
