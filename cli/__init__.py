"""The `isrwatch` command line: one module per command, each adding its parser; heavy modules (Spark,
FastAPI) load only inside the command that needs them."""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import version

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
    parser.add_argument("--version", action="version", version=f"isrwatch {version('isrwatch')}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(sub)
    _own_usage_errors(parser)
    return parser


def _own_usage_errors(parser: argparse.ArgumentParser) -> None:
    """Each (sub)command's parser records itself, so that an unrecognized argument, which argparse reports through
    the top-level parser, is reported by the command's own: `isrwatch run: error: ...` and its usage."""
    parser.set_defaults(_parser=parser)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _own_usage_errors(child)


def main(argv: list[str] | None = None) -> int:
    args, unrecognized = build_parser().parse_known_args(argv)
    if unrecognized:
        args._parser.error(f"unrecognized arguments: {' '.join(unrecognized)}")
    try:
        return args.func(args)
    except (ConfigError, StoreError) as exc:
        print(f"isrwatch: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("isrwatch: interrupted", file=sys.stderr)
        return 130
