"""The streaming job: events from files or Kafka in, decisions and live state into the store.

A Spark Structured Streaming query. It validates every event (invalid ones go to the
dead-letter table), keeps the partitions' replica state in applyInPandasWithState (hashed
into --buckets state keys) and applies each cluster's events and checks once that cluster's
frontier (its newest event time - allowed_lateness_ms) has passed them; events at or behind it
are counted as late.
ISR changes are propagated per broker, and each micro-batch is committed to the store in
one transaction, idempotently by batch id: restart with the same --checkpoint to resume.
"""

from __future__ import annotations

import argparse
import signal
import sys
from dataclasses import fields
from typing import TYPE_CHECKING

from isrwatch.lab.jars import spark_kafka_jars
from isrwatch.streaming.memory import check_driver_memory, planned_driver_memory
from isrwatch.streaming.spark import SparkSettings

from .common import CONFIG_HELP, add_config_arguments, add_store_argument, command, load_config, say

if TYPE_CHECKING:
    from isrwatch.streaming.job import JobOptions


def add_parser(sub: argparse._SubParsersAction) -> None:
    from isrwatch.streaming.sources import SOURCE_HELP

    rn = command(sub, "run", __doc__, main, epilog=SOURCE_HELP + "\n\n" + CONFIG_HELP)
    rn.add_argument(
        "--source",
        default="files:./var/events",
        metavar="SPEC",
        help="files:DIR, kafka:BOOTSTRAP/TOPICS or kafka-python:BOOTSTRAP/TOPICS, see below "
        "(default files:./var/events)",
    )
    add_store_argument(rn, "where each micro-batch is committed")
    rn.add_argument(
        "--checkpoint",
        default="./var/checkpoint",
        metavar="DIR",
        help="Spark checkpoint: offsets, state and the bucket layout (default ./var/checkpoint)",
    )
    add_config_arguments(rn)
    rn.add_argument(
        "--buckets",
        type=int,
        metavar="N",
        help="state keys the partitions are hashed into; fixed by the checkpoint (default 16; "
        "keep each to about 1-2k partitions)",
    )
    rn.add_argument(
        "--trigger",
        dest="trigger_seconds",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="micro-batch interval; longer batches amortise Spark's per-batch cost (default 5)",
    )
    rn.add_argument(
        "--max-per-batch",
        type=int,
        metavar="N",
        help="at most N files (files:) or Kafka records (kafka:, kafka-python:) per micro-batch "
        "(default: 64 MiB of files, 430,000 records: a job catching up keeps batches bounded)",
    )
    rn.add_argument(
        "--starting",
        choices=["earliest", "latest"],
        default="earliest",
        help="where a new checkpoint starts reading Kafka (default earliest)",
    )
    rn.add_argument("--available-now", action="store_true", help="process the input available at start, then stop")
    rn.add_argument(
        "--until-idle",
        type=float,
        metavar="SECONDS",
        help="stop after SECONDS without new input (default: run until stopped)",
    )
    SparkSettings.add_arguments(rn)
    rn.add_argument(
        "--partitions",
        type=int,
        metavar="N",
        help="the partitions you expect (all clusters): in local mode, --driver-memory defaults to the heap their "
        "state needs, and a configuration that cannot hold them is refused, saying what to set "
        "(docs/performance.md, At scale)",
    )
    rn.add_argument(
        "--kafka-output",
        metavar="BOOTSTRAP",
        help="also send decisions, propagation batches, AlterPartition requests and incidents as JSON to Kafka "
        "topics isrwatch.decisions (key cluster/topic/partition), isrwatch.propagations and isrwatch.alter-partitions "
        "(key cluster/broker) and isrwatch.incidents (key cluster/id, each version as it changes); at least once, "
        "with headers isrwatch-batch and isrwatch-seq to drop repeats by",
    )
    rn.add_argument(
        "--store-retry",
        dest="store_retry_seconds",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="how long a micro-batch keeps retrying an unreachable store (a database restart) before the query "
        "fails; restarted with the same --checkpoint it resumes where it stopped (default 600)",
    )
    rn.add_argument("--quiet", action="store_true", help="no per-batch progress lines")


def main(args: argparse.Namespace) -> int:
    # Spark loads only when the command runs.
    from pyspark.errors import StreamingQueryException

    from isrwatch.streaming.job import StreamJob, describe_failure

    if args.partitions is not None and args.driver_memory is None:
        args.driver_memory = planned_driver_memory(args.partitions, args.state_store)
    options = job_options(args)
    if args.partitions is not None:
        check_driver_memory(args.partitions, options.spark)
    job = StreamJob(options, echo=None if args.quiet else say)
    signal.signal(signal.SIGTERM, lambda *_: job.request_stop())
    try:
        return job.run()
    except StreamingQueryException as exc:
        print(f"isrwatch: error: the streaming query failed: {describe_failure(exc)}", file=sys.stderr)
        return 1


def job_options(args: argparse.Namespace) -> JobOptions:
    """What the command line asks of the job: each option is the JobOptions field of its name (its dest), but
    the configuration and Spark's settings, which several options make."""
    from isrwatch.streaming.job import JobOptions

    given = {f.name: getattr(args, f.name) for f in fields(JobOptions) if f.name not in ("config", "spark")}
    return JobOptions(
        **given,
        config=load_config(args.config, args.set, args.profile),
        spark=SparkSettings.from_args(args, spark_kafka_jars()),
    )
