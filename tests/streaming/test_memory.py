"""Memory planned, not found (docs/scale.md): `isrwatch run --partitions N` refuses a driver heap that cannot hold the
state of N partitions in local mode, and says what to set."""

from __future__ import annotations

import pytest

from isrwatch.cli import main
from isrwatch.state.config import ConfigError
from isrwatch.streaming.memory import check_driver_memory, heap_needed_mib, size_mib
from isrwatch.streaming.spark import SparkSettings


def test_sizes_read_as_spark_reads_them():
    assert [size_mib(s) for s in ("512m", "2g", "2G", "4096", "1t", "1024k")] == [512, 2048, 2048, 4096, 2**20, 1]
    with pytest.raises(ConfigError, match="--driver-memory 'two gigs'"):
        size_mib("two gigs")


def test_the_default_driver_memory_holds_100000_partitions_and_refuses_300000_saying_what_to_set():
    check_driver_memory(100_000, SparkSettings())
    with pytest.raises(ConfigError, match=r"--partitions 300,000 needs about 2,270 MiB .* set --driver-memory 3g"):
        check_driver_memory(300_000, SparkSettings())
    check_driver_memory(300_000, SparkSettings(driver_memory="3g"))
    check_driver_memory(1_000_000, SparkSettings(master="spark://127.0.0.1:7077"))  # the executors hold the state
    assert heap_needed_mib(1_000_000) <= 7 * 1024


def test_run_refuses_before_spark_starts(tmp_path, capsys):
    argv = ["run", "--partitions", "1000000", "--checkpoint", str(tmp_path / "cp"), "--store", str(tmp_path / "s.db")]
    assert main(argv) == 2
    assert "set --driver-memory 7g" in capsys.readouterr().err
