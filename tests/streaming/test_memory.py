"""Memory planned, not found (docs/performance.md, At scale): `isrwatch run --partitions N` sets the driver heap N
partitions need in local mode, and refuses, saying what to set, a heap or a machine that cannot hold them."""

from __future__ import annotations

import pytest

from isrwatch.cli import main
from isrwatch.state.config import ConfigError
from isrwatch.streaming.memory import (
    check_driver_memory,
    heap_needed_mib,
    planned_driver_memory,
    resident_needed_mib,
    size_mib,
)
from isrwatch.streaming.spark import SparkSettings

MACHINE = 24 * 1024  # the project's machine: 2 cores, 24 GiB


def test_sizes_read_as_spark_reads_them():
    assert [size_mib(s) for s in ("512m", "2g", "2G", "4096", "1t", "1024k")] == [512, 2048, 2048, 4096, 2**20, 1]
    with pytest.raises(ConfigError, match="--driver-memory 'two gigs'"):
        size_mib("two gigs")


def test_the_defaults_hold_300000_partitions_on_the_project_machine():
    check_driver_memory(300_000, SparkSettings(), MACHINE)  # the default heap and state store
    assert resident_needed_mib(300_000, "hdfs") <= MACHINE - 8 * 1024  # other work keeps 8 GiB
    assert planned_driver_memory(300_000, "hdfs") == planned_driver_memory(10_000, "hdfs") == "2g"
    assert planned_driver_memory(1_000_000, "hdfs") == "5g"


def test_a_heap_below_the_plan_is_refused_naming_what_to_set():
    need = heap_needed_mib(300_000, "hdfs")
    with pytest.raises(ConfigError, match=rf"--partitions 300,000 needs about {need:,} MiB .* set --driver-memory "):
        check_driver_memory(300_000, SparkSettings(driver_memory="1g"), MACHINE)
    check_driver_memory(300_000, SparkSettings(driver_memory="1g", master="spark://127.0.0.1:7077"), MACHINE)


def test_1000000_partitions_fit_the_project_machine_with_rocksdb_and_a_smaller_one_is_told_to_use_a_cluster():
    rocksdb = SparkSettings(state_store="rocksdb", driver_memory=planned_driver_memory(1_000_000, "rocksdb"))
    check_driver_memory(1_000_000, rocksdb, MACHINE)
    small = resident_needed_mib(1_000_000, "rocksdb") - 1
    with pytest.raises(ConfigError, match=r"more than this machine's .* run on a cluster \(--master\)"):
        check_driver_memory(1_000_000, rocksdb, small)
    with pytest.raises(ConfigError, match=r"--state-store rocksdb needs"):
        check_driver_memory(1_000_000, SparkSettings(driver_memory="16g"), resident_needed_mib(1_000_000, "rocksdb"))


def test_run_refuses_before_spark_starts(tmp_path, capsys):
    argv = ["run", "--partitions", "300000", "--driver-memory", "1g", "--checkpoint", str(tmp_path / "cp")]
    assert main([*argv, "--store", str(tmp_path / "s.db")]) == 2
    need = heap_needed_mib(300_000, "hdfs")
    assert f"set --driver-memory {-(-need // 1024)}g" in capsys.readouterr().err
