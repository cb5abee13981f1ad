"""Benchmarks that print numbers (isrwatch bench engine|stream|api|agent|latency --help).

Each benchmark measures and prints; no test asserts timings.
"""

from __future__ import annotations

import argparse

from .common import command

BENCHMARKS = ("engine", "stream", "api", "agent", "latency")


def add_parser(sub: argparse._SubParsersAction) -> None:
    bp = command(sub, "bench", __doc__, main)
    bp.add_argument(
        "rest",
        nargs=argparse.REMAINDER,
        metavar="BENCHMARK ...",
        help=f"one of {', '.join(BENCHMARKS)} (default engine) and its options",
    )


def main(args: argparse.Namespace) -> int:
    first = args.rest[0] if args.rest else "-"
    if not first.startswith("-") and first not in BENCHMARKS:  # the usage error is bench's, not the engine's
        args._parser.error(f"unknown benchmark {first!r} (choose from {', '.join(BENCHMARKS)})")
    name, rest = (first, args.rest[1:]) if first in BENCHMARKS else ("engine", args.rest)
    if name == "api":
        from isrwatch.bench.api import main as bench_api

        return bench_api(rest)
    if name == "stream":
        from isrwatch.bench.stream import main as bench_stream

        return bench_stream(rest)
    if name == "agent":
        from isrwatch.bench.agent import main as bench_agent

        return bench_agent(rest)
    if name == "latency":
        from isrwatch.bench.latency import main as bench_latency

        return bench_latency(rest)
    from isrwatch.bench.engine import main as bench_engine

    return bench_engine(rest)
