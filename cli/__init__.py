"""The `isrwatch` command line: one module per command, each adding its parser; heavy modules (Spark,
FastAPI) load only inside the command that needs them."""

from __future__ import annotations

import argparse
import sys

from isrwatch.state.config import ConfigError
from isrwatch.store import StoreError

from . import bench, demo, lab, package, replay, run, serve, simulate

COMMANDS = (replay, run, serve, simulate, demo, lab, bench, package)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="isrwatch",
        description="Real-time Kafka replication monitor: follower fetches and controller LeaderAndIsr "
        "events in, ISR shrink/expand decisions and throttled ISR-change propagation out.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ConfigError, StoreError) as exc:
        print(f"isrwatch: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("isrwatch: interrupted", file=sys.stderr)
        return 130
