"""Memory planned, not found: what a local-mode stream of N partitions holds, measured, and the settings that fit it.

In local mode (the default master) the driver's JVM runs the tasks and holds Spark's state store: the HDFS-backed
store keeps the two last committed versions of every state key on the heap and builds the next one (every key is
rewritten each batch); RocksDB keeps them off the heap, in native memory and on disk. Each key's state also passes
through the heap to and from the Python workers once a batch. The figures are peaks measured with
`isrwatch bench stream` at 300,000 partitions and in the first batch of 1,000,000 (docs/performance.md, At scale): the
heap is the live heap after a garbage collection times `GC_HEADROOM`, the rest is resident memory outside the heap
(the driver's Python, the JVM's native memory, the Python workers). On a cluster the executors hold the state,
spread over them: size `spark.executor.memory` likewise, per executor's share (deploy/README.md).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

from isrwatch.state.config import ConfigError

from .spark import DEFAULT_DRIVER_MEMORY, SparkSettings

GC_HEADROOM = 1.5  # heap set / live heap: G1 needs free regions to copy into, and a state key's blob is humongous
_SIZE = re.compile(r"(\d+)([kmgt]?)b?", re.IGNORECASE)
_MIB = {"k": 1 / 1024, "m": 1, "": 1, "g": 1024, "t": 1024 * 1024}  # Spark reads a bare number as MiB


@dataclass(frozen=True)
class Footprint:
    """Memory that grows with the partitions: a fixed part and a part per partition."""

    base_mib: int
    bytes_per_partition: int

    def mib(self, partitions: int) -> int:
        return self.base_mib + math.ceil(partitions * self.bytes_per_partition / 2**20)


# The driver heap to set (`--driver-memory`), by state store: the measured peak live heap x GC_HEADROOM. HDFS at
# 300,000 partitions: 1,152 MiB after a collection at most, on 2g, through the batches that settle every partition
# (a full collection found 504 MiB live); RocksDB at 1,000,000: 1,705 MiB in the first batch (each key's whole state
# passes through the heap as Arrow).
HEAP = {"hdfs": Footprint(512, 4608), "rocksdb": Footprint(512, 2560)}
# Resident memory outside that heap: at 10,000 partitions 1.6 GiB (the Python workers alone 1.2 GiB, a batch of
# 400,000 events), at 300,000 through the batch that settled them all 4.6 GiB: the JVM's own 1.2 GiB (metaspace,
# threads, Arrow and network buffers; RocksDB's native memory on top), the driver's Python 707 MiB (that batch's
# 300,000 decisions) and the two Python workers 2.7 GiB (the keys' states decoded).
OUTSIDE_HEAP = {"hdfs": Footprint(1664, 11 * 1024), "rocksdb": Footprint(1664, 11 * 1024)}


def size_mib(text: str) -> float:
    """A JVM memory size as Spark writes it (512m, 2g, 4096) in MiB; a ConfigError if it is none."""
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise ConfigError(f"--driver-memory {text!r}: expected a size such as 512m or 4g")
    return int(match.group(1)) * _MIB[match.group(2).lower()]


def heap_needed_mib(partitions: int, state_store: str = "hdfs") -> int:
    """The driver heap a local-mode stream of `partitions` partitions needs with `state_store`, MiB."""
    return HEAP[state_store].mib(partitions)


def resident_needed_mib(partitions: int, state_store: str = "hdfs") -> int:
    """The machine memory a local-mode stream of `partitions` partitions takes in all (its heap and the rest), MiB."""
    return heap_needed_mib(partitions, state_store) + OUTSIDE_HEAP[state_store].mib(partitions)


def planned_driver_memory(partitions: int, state_store: str) -> str:
    """`--driver-memory` for `partitions` when it is not given: the heap they need, in whole GiB, at least the
    default."""
    need = max(heap_needed_mib(partitions, state_store), size_mib(DEFAULT_DRIVER_MEMORY))
    return f"{math.ceil(need / 1024)}g"


def machine_mib() -> int:
    """This machine's physical memory, MiB."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20


def _local(spark: SparkSettings) -> bool:
    return spark.master.startswith("local") if spark.master else "PYSPARK_GATEWAY_PORT" not in os.environ


def check_driver_memory(partitions: int, spark: SparkSettings, machine: int | None = None) -> None:
    """Refuse, in local mode, a stream of `partitions` that cannot fit, saying what to set instead of dying with a
    Java heap error once the state has grown: a --driver-memory under the heap they need, or more memory in all
    than the machine's (`machine` MiB, default this one's). On a cluster the executors hold the state: nothing to
    check here."""
    if not _local(spark):
        return
    store = spark.state_store
    machine = machine_mib() if machine is None else machine
    total = resident_needed_mib(partitions, store)
    if total > machine:
        other = "rocksdb" if store == "hdfs" else None
        hint = (
            f"--state-store {other} needs {resident_needed_mib(partitions, other):,} MiB; "
            if other and resident_needed_mib(partitions, other) <= machine
            else ""
        )
        raise ConfigError(
            f"--partitions {partitions:,} with the {store} state store needs about {total:,} MiB in local mode "
            f"(docs/performance.md, At scale), more than this machine's {machine:,} MiB: {hint}or run on a cluster "
            "(--master) whose executors hold the state"
        )
    need = heap_needed_mib(partitions, store)
    if size_mib(spark.driver_memory) < need:
        raise ConfigError(
            f"--partitions {partitions:,} needs about {need:,} MiB of driver heap in local mode with the {store} "
            f"state store (docs/performance.md, At scale); --driver-memory {spark.driver_memory} is less: set "
            f"--driver-memory {math.ceil(need / 1024)}g, or run on a cluster (--master) whose executors hold the state"
        )
