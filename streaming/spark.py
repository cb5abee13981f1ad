"""The Spark session isrwatch runs in: local by default, quiet, with the state store provider chosen by name
and Spark's Kafka connector jars when the caller found them provisioned (`isrwatch.lab.jars`, the command line's
concern: this room does not provision)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from isrwatch.state.config import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")
STATE_STORES = {
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
}
DEFAULT_DRIVER_MEMORY = "2g"  # `--driver-memory` when neither it nor `isrwatch run --partitions` is given


@dataclass(frozen=True)
class SparkSettings:
    """What isrwatch sets on the session; `extra` are raw `spark.*` settings (`--spark-conf`), applied last."""

    master: str | None = None  # None: spark-submit's master when it launched us, else local[2]
    shuffle_partitions: int = 2
    state_store: str = "hdfs"
    driver_memory: str = DEFAULT_DRIVER_MEMORY
    extra: dict[str, str] = field(default_factory=dict)
    kafka_jars: tuple[str, ...] = ()  # Spark's Kafka connector and its dependencies, put on spark.jars

    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        """The command line's Spark options (`isrwatch run`, `isrwatch bench stream`), read by `from_args`."""
        p.add_argument(
            "--state-store",
            choices=sorted(STATE_STORES),
            default="hdfs",
            help="Spark state store provider: hdfs (in-memory, default) or rocksdb (large state)",
        )
        p.add_argument(
            "--shuffle-partitions",
            type=int,
            default=2,
            metavar="N",
            help="spark.sql.shuffle.partitions, fixed by the checkpoint (default 2 = local cores)",
        )
        p.add_argument("--master", help="Spark master (default: the one spark-submit was given, else local[2])")
        p.add_argument(
            "--driver-memory",
            help=f"spark.driver.memory (default {DEFAULT_DRIVER_MEMORY}; `isrwatch run --partitions N`: what N needs)",
        )
        p.add_argument(
            "--spark-conf",
            action="append",
            default=[],
            metavar="spark.KEY=VALUE",
            help="any other Spark setting, e.g. spark.jars.packages=... (repeatable)",
        )

    @classmethod
    def from_args(cls, args: argparse.Namespace, kafka_jars: Sequence[Path] = ()) -> SparkSettings:
        """The settings the options of `add_arguments` give; a --spark-conf not of the form spark.KEY=VALUE is a
        ConfigError naming it."""
        extra = {}
        for pair in args.spark_conf:
            key, sep, value = pair.partition("=")
            if not sep or not key.startswith("spark."):
                raise ConfigError(f"--spark-conf {pair!r}: expected spark.KEY=VALUE")
            extra[key] = value
        return cls(
            master=args.master,
            shuffle_partitions=args.shuffle_partitions,
            state_store=args.state_store,
            driver_memory=args.driver_memory or DEFAULT_DRIVER_MEMORY,
            extra=extra,
            kafka_jars=tuple(str(p) for p in kafka_jars),
        )

    def conf(self) -> dict[str, str]:
        # -Xss: Spark's stream execution thread died of a StackOverflowError deep in java.util.regex on a loaded
        # machine (the lab with the agent); the JVM's 1 MB default stack leaves no margin for Spark's own regexes.
        java_opts = f"-Dlog4j.configurationFile={LOG4J_CONFIG.as_uri()} -Xss16m"
        conf = {
            "spark.app.name": "isrwatch",
            "spark.driver.memory": self.driver_memory,
            "spark.driver.extraJavaOptions": java_opts,
            "spark.executor.extraJavaOptions": java_opts,
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": str(self.shuffle_partitions),
            "spark.sql.streaming.stateStore.providerClass": STATE_STORES[self.state_store],
            # Bucket states are one blob each: fewer, larger Arrow batches cost less per event.
            "spark.sql.execution.arrow.maxRecordsPerBatch": "20000",
            "spark.sql.session.timeZone": "UTC",
            # Without the UI nobody reads the history of jobs and queries; a long run keeps only a little.
            "spark.ui.retainedJobs": "50",
            "spark.ui.retainedStages": "50",
            "spark.ui.retainedTasks": "2000",
            "spark.sql.ui.retainedExecutions": "20",
            **self.extra,
        }
        # Spark's Kafka source from the provisioned jars (nothing downloaded at run time); --spark-conf spark.jars adds.
        local = ",".join(self.kafka_jars)
        if local:
            conf["spark.jars"] = ",".join(filter(None, [local, self.extra.get("spark.jars")]))
        # Under spark-submit (a JVM gateway is already up) the master is the submitter's to choose.
        if self.master or "PYSPARK_GATEWAY_PORT" not in os.environ:
            conf["spark.master"] = self.master or "local[2]"
        return conf


def quiet_environment(python: str | None = None) -> None:
    """Settings the driver and its Python workers must inherit; set before the JVM starts. The workers' Python is
    `python` (`spark.pyspark.python`, which PySpark reads only under spark-submit), else PYSPARK_PYTHON, else the
    driver's own interpreter (on a cluster, the preflight checks that the executors have it)."""
    if python:
        os.environ["PYSPARK_PYTHON"] = python
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    warnings = os.environ.get("PYTHONWARNINGS", "")
    if "FutureWarning" not in warnings:
        os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [warnings, "ignore::FutureWarning"]))


def session(settings: SparkSettings | None = None) -> SparkSession:
    """The process's Spark session, created quiet on first use (later calls reuse it and its settings)."""
    settings = settings or SparkSettings()
    quiet_environment(settings.extra.get("spark.pyspark.python"))
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for key, value in settings.conf().items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def is_local(spark: SparkSession) -> bool:
    """Whether the session runs its tasks in the driver's JVM (`local`, `local[N]`): no executors elsewhere."""
    return spark.sparkContext.master.startswith("local")
