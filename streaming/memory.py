"""Memory planned, not found: the driver heap a local-mode stream needs for the partitions it is told to expect.

In local mode (the default master) the driver's JVM holds Spark's state store: the HDFS-backed store keeps the two
last committed versions of every state key in memory and builds the next one (every key is rewritten each batch),
and the batch's reports pass through it to the sink. What a partition costs there was measured with
`isrwatch bench stream` (docs/scale.md): the figure below is set so that the 300,000-partition run that died of
`OutOfMemoryError: Java heap space` at the default 2g is refused at 2g instead of dying an hour in. On a cluster the
executors hold the state, spread over them: size spark.executor.memory likewise, per executor's share.
"""

from __future__ import annotations

import math
import os
import re

from isrwatch.state.config import ConfigError

from .spark import SparkSettings

JVM_BASE_MIB = 512  # Spark's own heap, a batch of 400,000 events in flight
HEAP_BYTES_PER_PARTITION = 6 * 1024  # state versions, reports and the garbage collector's headroom, per partition
_SIZE = re.compile(r"(\d+)([kmgt]?)b?", re.IGNORECASE)
_MIB = {"k": 1 / 1024, "m": 1, "": 1, "g": 1024, "t": 1024 * 1024}  # Spark reads a bare number as MiB


def size_mib(text: str) -> float:
    """A JVM memory size as Spark writes it (512m, 2g, 4096) in MiB; a ConfigError if it is none."""
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise ConfigError(f"--driver-memory {text!r}: expected a size such as 512m or 4g")
    return int(match.group(1)) * _MIB[match.group(2).lower()]


def heap_needed_mib(partitions: int) -> int:
    """The driver heap a local-mode stream of `partitions` partitions needs, MiB."""
    return JVM_BASE_MIB + math.ceil(partitions * HEAP_BYTES_PER_PARTITION / 2**20)


def check_driver_memory(partitions: int, spark: SparkSettings) -> None:
    """Refuse, saying what to set, a --driver-memory that cannot hold the state of `partitions` in local mode (the
    job would otherwise die with a Java heap error once the state has grown); on a cluster, nothing to check here."""
    local = spark.master.startswith("local") if spark.master else "PYSPARK_GATEWAY_PORT" not in os.environ
    need = heap_needed_mib(partitions)
    driver_memory = spark.driver_memory
    if local and size_mib(driver_memory) < need:
        raise ConfigError(
            f"--partitions {partitions:,} needs about {need:,} MiB of driver heap in local mode (docs/scale.md); "
            f"--driver-memory {driver_memory} is less: set --driver-memory {math.ceil(need / 1024)}g, or run on a "
            "cluster (--master) whose executors hold the state"
        )
