"""The Spark session isrwatch runs in: local by default, quiet, with the state store provider chosen by name
and Spark's Kafka connector from .tools/jars/spark-kafka when it was provisioned."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .lab.jars import spark_kafka_jars

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")
STATE_STORES = {
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
}


@dataclass(frozen=True)
class SparkSettings:
    """What isrwatch sets on the session; `extra` are raw `spark.*` settings (`--spark-conf`), applied last."""

    master: str | None = None  # None: spark-submit's master when it launched us, else local[2]
    shuffle_partitions: int = 2
    state_store: str = "hdfs"
    driver_memory: str = "2g"
    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, args: Any, extra: dict[str, str]) -> SparkSettings:
        """From the command line's `--master`, `--shuffle-partitions`, `--state-store` and `--driver-memory`."""
        return cls(
            master=args.master,
            shuffle_partitions=args.shuffle_partitions,
            state_store=args.state_store,
            driver_memory=args.driver_memory,
            extra=extra,
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
        local = ",".join(str(p) for p in spark_kafka_jars())
        if local:
            conf["spark.jars"] = ",".join(filter(None, [local, self.extra.get("spark.jars")]))
        # Under spark-submit (a JVM gateway is already up) the master is the submitter's to choose.
        if self.master or "PYSPARK_GATEWAY_PORT" not in os.environ:
            conf["spark.master"] = self.master or "local[2]"
        return conf


def quiet_environment() -> None:
    """Settings the driver and its Python workers must inherit; set before the JVM starts."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    warnings = os.environ.get("PYTHONWARNINGS", "")
    if "FutureWarning" not in warnings:
        os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [warnings, "ignore::FutureWarning"]))


def session(settings: SparkSettings | None = None) -> SparkSession:
    """The process's Spark session, created quiet on first use (later calls reuse it and its settings)."""
    quiet_environment()
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for key, value in (settings or SparkSettings()).conf().items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
