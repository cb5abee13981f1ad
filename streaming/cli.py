"""The `isrwatch` command line: replay, run, bench. Heavy modules (Spark, FastAPI) load only when used."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

import msgspec

from state.config import Config, ConfigError

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
    out = Path(args.out)
    write_outputs(out, result.decisions, result.propagations, result.states, result.dead_letters,
                  result.summary)
    s = result.summary
    _progress(
        f"{s['lines']:,} lines, {s['events']:,} events, {s['dead_letters']:,} dead letters -> "
        f"{s['decisions']:,} decisions {s['decisions_by_kind']}, {s['propagations']:,} propagations, "
        f"{s['partitions']:,} partitions; {s.get('events_per_second') or 0:,} lines/s; wrote {out}/"
    )
    if s.get("events_after_until"):
        _progress(f"warning: {s['events_after_until']:,} events after --until {s['until']} were not applied")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
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
    rp.add_argument("--out", required=True, metavar="DIR", help="output directory (created if missing)")
    rp.add_argument("--config", metavar="FILE.json", help="a JSON object of configuration keys (see below)")
    rp.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override one configuration key; VALUE is JSON (repeatable)")
    rp.add_argument("--until", type=int, metavar="TS",
                    help="end time in epoch ms: events and scheduled checks up to and including it are "
                         "applied (default: the largest ts of a valid event)")
    rp.add_argument("--engine", choices=["local", "spark"], default="local",
                    help="local: one Python process (default); spark: the streaming query in local Spark")
    rp.set_defaults(func=cmd_replay)

    bp = sub.add_parser("bench", help="benchmarks that print numbers (isrwatch bench engine --help)")
    bp.add_argument("rest", nargs=argparse.REMAINDER, help="benchmark name and its options")
    bp.set_defaults(func=cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"isrwatch: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("isrwatch: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
