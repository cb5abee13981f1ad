"""`isrwatch bench engine` in both ISR protocols on the simulator's workload: the figures it prints."""

from __future__ import annotations

import ast
import re
import subprocess
import sys

import pytest


def bench_engine(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "isrwatch.cli", "bench", "engine", *args], capture_output=True, text=True, timeout=600
    )


@pytest.mark.parametrize("protocol", ["zookeeper", "alter_partition"])
def test_the_simulator_workload_shrinks_and_expands_in_either_protocol(protocol):
    done = bench_engine(
        "--events", "30000", "--partitions", "60", "--generator", "simulator", "--isr-protocol", protocol
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert re.search(rf"^generated .*\(simulator, {protocol}: 60 partitions", out, re.M), out
    engine = re.search(
        r"^engine: +[\d,]+ events/s +\(30,000 events in [\d.]+ s; decisions (\{.*\}), (\d+) propagation batches"
        r"(?:, (\d+) AlterPartition requests)?\)$",
        out,
        re.M,
    )
    assert engine, out
    kinds = ast.literal_eval(engine[1])
    assert kinds.get("shrink", 0) > 0 and kinds.get("expand", 0) > 0, out
    # ZooKeeper leaders propagate their changes in batches; AlterPartition leaders send requests the controller answers.
    batches, requests = int(engine[2]), engine[3]
    assert (batches > 0 and requests is None) if protocol == "zookeeper" else (batches == 0 and int(requests) > 0), out
    replay = re.search(
        r"^replay: +[\d,]+ events/s .*; (\d+) decisions(?:, (\d+) AlterPartition requests)?\)$", out, re.M
    )
    assert replay and int(replay[1]) == sum(kinds.values()) and replay[2] == engine[3], out
    cpu = re.search(r"^cpu: +engine ([\d.]+) s, replay ([\d.]+) s$", out, re.M)
    assert cpu and float(cpu[1]) > 0 and float(cpu[2]) > 0, out
    assert re.search(r"^peak RSS [\d,]+ MiB$", out, re.M), out


def test_alter_partition_refuses_the_synthetic_stream_which_has_no_controller():
    done = bench_engine("--isr-protocol", "alter_partition", "--generator", "synthetic")
    assert done.returncode == 2 and "--generator synthetic: its stream has no controller" in done.stderr, done.stderr
