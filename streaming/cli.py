"""The `isrwatch` command line: replay, run, bench. Heavy modules (Spark, FastAPI) load only when used."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from state.config import Config, ConfigError
from state.store import StoreError, open_store

if TYPE_CHECKING:
    from state.replay import ReplayResult

CONFIG_HELP = """configuration keys (SPEC §2; --config FILE.json and/or --set KEY=VALUE, later wins):
  replica_lag_time_max_ms        30000  Kafka replica.lag.time.max.ms (10000 before Kafka 2.5)
  isr_expiration_interval_ms     lag/2  period of the scheduled shrink check; 0 = explicit ticks only
  isr_change_check_interval_ms   2500   period of the propagation check; 0 = explicit ticks only
  isr_change_linger_ms           5000   quiet time before a broker sends its ISR-change batch
  isr_change_max_delay_ms        60000  longest time between two batches of a broker
  schedule_origin_ms             0      scheduled checks run at origin + k*interval
  min_insync_replicas            1      under-min-ISR: |ISR| < it; at-min-ISR: |ISR| = it
  min_insync_replicas_by_topic   {}     per-topic overrides, e.g. --set 'min_insync_replicas_by_topic={"orders":2}'
  allowed_lateness_ms            5000   streaming only: watermark delay
"""


def _progress(message: str) -> None:
    print(f"isrwatch: {message}", file=sys.stderr, flush=True)


def load_config(path: str | None, overrides: list[str]) -> Config:
    """The configuration from an optional JSON file plus --set overrides."""
    raw: dict = {}
    if path:
        try:
            raw = json.loads(Path(path).read_text())
        except OSError as exc:
            raise ConfigError(f"--config {path}: {exc.strerror}") from None
        except json.JSONDecodeError as exc:
            raise ConfigError(f"--config {path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    return Config.from_dict(raw).with_overrides(overrides)


def write_outputs(out: Path, decisions: list[dict], propagations: list[dict], states: list[dict],
                  dead_letters: list[dict], summary: dict) -> None:
    """Write the replay output files (SPEC §5 fields), one JSON object per line."""
    out.mkdir(parents=True, exist_ok=True)
    encode = msgspec.json.encode
    for name, rows in (("decisions", decisions), ("propagations", propagations), ("state", states),
                       ("dead_letter", dead_letters)):
        with open(out / f"{name}.jsonl", "wb") as fh:
            for row in rows:
                fh.write(encode(row))
                fh.write(b"\n")
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")


def cmd_replay(args: argparse.Namespace) -> int:
    config = load_config(args.config, args.set)
    if not args.out and not args.store:
        raise ConfigError("give --out DIR, --store URL or both")
    for path in args.events:
        if not Path(path).is_file():
            raise ConfigError(f"events file {path}: no such file")
    if args.engine == "spark":
        from streaming.replay_spark import replay_spark

        result = replay_spark(args.events, config, args.until, progress=_progress)
    else:
        from state.replay import replay

        with contextlib.ExitStack() as stack:
            handles = [stack.enter_context(open(path, "rb")) for path in args.events]
            result = replay(handles, config, args.until, progress=_progress)
    written = []
    if args.out:
        write_outputs(Path(args.out), result.decisions, result.propagations, result.states, result.dead_letters,
                      result.summary)
        written.append(f"{args.out}/")
    if args.store:
        written.append(f"batch {store_replay(args.store, result)} of {args.store}")
    s = result.summary
    _progress(
        f"{s['lines']:,} lines, {s['events']:,} events, {s['dead_letters']:,} dead letters -> "
        f"{s['decisions']:,} decisions {s['decisions_by_kind']}, {s['propagations']:,} propagations, "
        f"{s['partitions']:,} partitions; {s.get('events_per_second') or 0:,} lines/s; wrote {' and '.join(written)}"
    )
    if s.get("events_after_until"):
        _progress(f"warning: {s['events_after_until']:,} events after --until {s['until']} were not applied")
    return 0


def store_replay(url: str, result: ReplayResult) -> int:
    """Write a replay's outputs to the store as one batch after the last one; returns its batch id.

    The watermark is the end of the replay (every check up to --until ran), so the API judges
    "how long ago" at that event time.
    """
    s = result.summary
    counters = {f"{name}.{reason}": count for name, key in (("dead_letters", "dead_letters_by_reason"),
                                                             ("ignored_fetches", "ignored_fetches_by_reason"),
                                                             ("ignored_appends", "ignored_appends_by_reason"))
                for reason, count in s.get(key, {}).items()}
    with open_store(url) as store:
        last = store.last_batch_id()
        batch_id = 0 if last is None else last + 1
        store.write_batch(batch_id, decisions=result.decisions, propagations=result.propagations,
                          partitions=result.states, dead_letters=result.dead_letters, brokers=result.brokers,
                          counters=counters,
                          watermark_ms=s["until"] + 1)
    return batch_id


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from api.app import create_app
    from api.settings import TOKEN_ENV, Settings

    settings = Settings(
        token=args.token or os.environ.get(TOKEN_ENV) or None, cors_origins=tuple(args.cors_origin),
        shrink_window_ms=args.shrink_window_ms, top_followers=args.top_followers,
        partition_metrics_topics=tuple(t for t in args.partition_metrics_topics.split(",") if t),
        ready_max_batch_age_s=args.ready_max_batch_age, ready_max_watermark_lag_s=args.ready_max_watermark_lag)
    app = create_app(args.store, settings)
    _progress(f"serving {args.store} on http://{args.host}:{args.port} "
              f"({'bearer token required' if settings.token else 'no token'})")
    # One worker: the metrics collector reads the store itself, so no multiprocess mode is needed.
    uvicorn.run(app, host=args.host, port=args.port, workers=1, log_level=args.log_level,
                access_log=args.access_log)
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    from streaming.simulate_cmd import main as simulate_main

    return simulate_main(args)


def cmd_demo(args: argparse.Namespace) -> int:
    from streaming.demo import main as demo_main

    return demo_main(args)


def cmd_run(args: argparse.Namespace) -> int:
    import signal

    from pyspark.errors import StreamingQueryException

    from streaming.job import JobOptions, StreamJob, describe_failure
    from streaming.spark import SparkSettings

    extra = {}
    for pair in args.spark_conf:
        key, sep, value = pair.partition("=")
        if not sep or not key.startswith("spark."):
            raise ConfigError(f"--spark-conf {pair!r}: expected spark.KEY=VALUE")
        extra[key] = value
    options = JobOptions(
        source=args.source, store=args.store, checkpoint=args.checkpoint, config=load_config(args.config, args.set),
        buckets=args.buckets, trigger_seconds=args.trigger, max_per_batch=args.max_per_batch, starting=args.starting,
        available_now=args.available_now, until_idle=args.until_idle, kafka_output=args.kafka_output,
        spark=SparkSettings(master=args.master, shuffle_partitions=args.shuffle_partitions,
                            state_store=args.state_store, driver_memory=args.driver_memory, extra=extra))
    job = StreamJob(options, echo=None if args.quiet else _progress)
    signal.signal(signal.SIGTERM, lambda *_: job.request_stop())
    try:
        return job.run()
    except StreamingQueryException as exc:
        print(f"isrwatch: error: the streaming query failed: {describe_failure(exc)}", file=sys.stderr)
        return 1


def cmd_bench(args: argparse.Namespace) -> int:
    if args.rest[:1] == ["api"]:
        from bench.api import main as bench_api

        return bench_api(args.rest[1:])
    if args.rest[:1] == ["stream"]:
        from bench.stream import main as bench_stream

        return bench_stream(args.rest[1:])
    if args.rest[:1] == ["agent"]:
        from bench.agent import main as bench_agent

        return bench_agent(args.rest[1:])
    from bench.engine import main as bench_engine

    return bench_engine(args.rest)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="isrwatch",
        description="Real-time Kafka replication monitor: follower fetches and controller LeaderAndIsr "
                    "events in, ISR shrink/expand decisions and throttled ISR-change propagation out.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    rp = sub.add_parser(
        "replay", formatter_class=argparse.RawDescriptionHelpFormatter,
        help="replay recorded events through the replica engine and write its outputs",
        description="Replay JSONL events (SPEC §3) in (ts, seq) order, run the scheduled isr-expiration and "
                    "propagation checks up to --until, and write decisions.jsonl, propagations.jsonl, "
                    "state.jsonl, dead_letter.jsonl and summary.json into --out. Replaying the same events "
                    "with another --set replica_lag_time_max_ms=... shows how many shrinks it would cause.",
        epilog=CONFIG_HELP,
    )
    rp.add_argument("events", nargs="+", metavar="EVENTS.jsonl",
                    help="event files, one JSON object per line; a missing seq is the line number")
    rp.add_argument("--out", metavar="DIR", help="output directory (created if missing)")
    rp.add_argument("--store", metavar="URL",
                    help="also write the outputs to this store as one batch (sqlite:///PATH, a file path or "
                         "postgresql://...), for `isrwatch serve`")
    rp.add_argument("--config", metavar="FILE.json", help="a JSON object of configuration keys (see below)")
    rp.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override one configuration key; VALUE is JSON (repeatable)")
    rp.add_argument("--until", type=int, metavar="TS",
                    help="end time in epoch ms: events and scheduled checks up to and including it are "
                         "applied (default: the largest ts of a valid event)")
    rp.add_argument("--engine", choices=["local", "spark"], default="local",
                    help="local: one Python process (default); spark: the streaming query in local Spark")
    rp.set_defaults(func=cmd_replay)

    add_run_parser(sub)

    sp = sub.add_parser(
        "serve", help="serve the store over HTTP: REST API under /v1, /metrics, /healthz, /readyz",
        description="A read-only FastAPI service (one uvicorn worker) over the store the streaming job or "
                    "`isrwatch replay --store` writes. OpenAPI at /docs.")
    sp.add_argument("--store", default=os.environ.get("ISRWATCH_STORE", "sqlite:///isrwatch.db"), metavar="URL",
                    help="sqlite:///PATH, a file path or postgresql://user:pw@host:port/db "
                         "(default: $ISRWATCH_STORE or sqlite:///isrwatch.db)")
    sp.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    sp.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    sp.add_argument("--token", help="require `Authorization: Bearer TOKEN` on every route but the health probes "
                                    "(default: $ISRWATCH_API_TOKEN; none = open)")
    sp.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                    help="allow browser requests from this origin (repeatable; default: CORS off)")
    sp.add_argument("--shrink-window-ms", type=int, metavar="MS",
                    help="a follower is predicted to shrink when eligible for removal within MS of event time "
                         "(default: half its replica.lag.time.max.ms)")
    sp.add_argument("--top-followers", type=int, default=10, metavar="N",
                    help="per-follower metrics for the N slowest and N most lagging followers (default 10)")
    sp.add_argument("--partition-metrics-topics", default="", metavar="T1,T2",
                    help="topics whose every partition and follower get their own metric series (default none)")
    sp.add_argument("--ready-max-batch-age", type=float, default=300.0, metavar="SECONDS",
                    help="/readyz fails when the last batch is older (wall clock; 0 = unchecked; default 300)")
    sp.add_argument("--ready-max-watermark-lag", type=float, default=600.0, metavar="SECONDS",
                    help="/readyz fails when the watermark lags the wall clock more (0 = unchecked; default 600)")
    sp.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    sp.add_argument("--access-log", action="store_true", help="log every request")
    sp.set_defaults(func=cmd_serve)

    from streaming.simulate_cmd import add_arguments as add_simulate_arguments
    from streaming.simulator import FAULT_HELP

    mp = sub.add_parser(
        "simulate", formatter_class=argparse.RawDescriptionHelpFormatter,
        help="simulate a Kafka cluster: its fetch, append and LeaderAndIsr events, with scripted faults",
        description="A deterministic simulated cluster (brokers, producers, follower fetchers, the controller) "
                    "emitting SPEC §3 events in real time or as fast as possible, to stdout, rotating JSONL "
                    "files (--out-dir) or Kafka (--kafka), with faults from --scenario and --fault.",
        epilog=FAULT_HELP)
    add_simulate_arguments(mp)
    mp.set_defaults(func=cmd_simulate)

    from streaming.demo import add_arguments as add_demo_arguments

    dp = sub.add_parser(
        "demo", help="see it work: a simulated cluster's fault story, the streaming job and the API, live",
        description="Starts the simulator playing a scripted fault story in real time, the streaming job on the "
                    "embedded default (file source, SQLite store, local Spark) and the API with its status "
                    "page; prints the URLs and a live summary. Ctrl-C stops everything.")
    add_demo_arguments(dp)
    dp.set_defaults(func=cmd_demo)

    bp = sub.add_parser("bench", help="benchmarks that print numbers (isrwatch bench engine|api|stream|agent --help)")
    bp.add_argument("rest", nargs=argparse.REMAINDER, help="benchmark name and its options")
    bp.set_defaults(func=cmd_bench)
    return parser


def add_run_parser(sub: argparse._SubParsersAction) -> None:
    from streaming.sources import SOURCE_HELP

    rn = sub.add_parser(
        "run", formatter_class=argparse.RawDescriptionHelpFormatter,
        help="the streaming job: events from files or Kafka in, decisions and live state into the store",
        description="A Spark Structured Streaming query. It validates every event (invalid ones go to the\n"
                    "dead-letter table), keeps the partitions' replica state in applyInPandasWithState (hashed\n"
                    "into --buckets state keys) and applies events and checks once the watermark (newest event\n"
                    "time - allowed_lateness_ms) has passed them; events at or behind it are counted as late.\n"
                    "ISR changes are propagated per broker, and each micro-batch is committed to the store in\n"
                    "one transaction, idempotently by batch id: restart with the same --checkpoint to resume.",
        epilog=SOURCE_HELP + "\n\n" + CONFIG_HELP)
    rn.add_argument("--source", default="files:./var/events", metavar="SPEC",
                    help="files:DIR, kafka:BOOTSTRAP/TOPICS or kafka-python:BOOTSTRAP/TOPICS, see below "
                         "(default files:./var/events)")
    rn.add_argument("--store", default="sqlite:///var/isrwatch.db", metavar="URL",
                    help="sqlite:///PATH, a file path or postgresql://user:pw@host:port/db "
                         "(default sqlite:///var/isrwatch.db)")
    rn.add_argument("--checkpoint", default="./var/checkpoint", metavar="DIR",
                    help="Spark checkpoint: offsets, state and the bucket layout (default ./var/checkpoint)")
    rn.add_argument("--config", metavar="FILE.json", help="a JSON object of configuration keys (see below)")
    rn.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override one configuration key; VALUE is JSON (repeatable)")
    rn.add_argument("--buckets", type=int, metavar="N",
                    help="state keys the partitions are hashed into; fixed by the checkpoint (default 16; "
                         "keep each to about 1-2k partitions)")
    rn.add_argument("--trigger", type=float, default=5.0, metavar="SECONDS",
                    help="micro-batch interval; longer batches amortise Spark's per-batch cost (default 5)")
    rn.add_argument("--max-per-batch", type=int, metavar="N",
                    help="at most N files (files:) or Kafka records (kafka:, kafka-python:) per micro-batch "
                         "(default: 64 MiB of files, 430,000 records: a job catching up keeps batches bounded)")
    rn.add_argument("--starting", choices=["earliest", "latest"], default="earliest",
                    help="where a new checkpoint starts reading Kafka (default earliest)")
    rn.add_argument("--available-now", action="store_true",
                    help="process the input available at start, then stop")
    rn.add_argument("--until-idle", type=float, metavar="SECONDS",
                    help="stop after SECONDS without new input (default: run until stopped)")
    rn.add_argument("--state-store", choices=["hdfs", "rocksdb"], default="hdfs",
                    help="Spark state store provider: hdfs (in-memory, default) or rocksdb (large state)")
    rn.add_argument("--shuffle-partitions", type=int, default=2, metavar="N",
                    help="spark.sql.shuffle.partitions, fixed by the checkpoint (default 2 = local cores)")
    rn.add_argument("--master", help="Spark master (default: the one spark-submit was given, else local[2])")
    rn.add_argument("--driver-memory", default="2g", help="spark.driver.memory (default 2g)")
    rn.add_argument("--spark-conf", action="append", default=[], metavar="spark.KEY=VALUE",
                    help="any other Spark setting, e.g. spark.jars.packages=... (repeatable)")
    rn.add_argument("--kafka-output", metavar="BOOTSTRAP",
                    help="also send decisions and propagation batches as JSON to Kafka topics "
                         "isrwatch.decisions (key cluster/topic/partition) and isrwatch.propagations "
                         "(key cluster/broker)")
    rn.add_argument("--quiet", action="store_true", help="no per-batch progress lines")
    rn.set_defaults(func=cmd_run)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ConfigError, StoreError) as exc:
        print(f"isrwatch: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("isrwatch: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
