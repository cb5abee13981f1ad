"""`isrwatch bench engine`: events/s of the pure engine and of a whole replay, peak memory, state size.

Prints numbers; asserts nothing; the targets and the figures measured are in README.md, Performance.
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import sys
import tempfile
import time
import tracemalloc

import msgspec

from isrwatch.sim.synthetic import StreamShape, generate
from isrwatch.state.config import Config
from isrwatch.state.engine import PartitionEngine
from isrwatch.state.propagation import PropagationBook
from isrwatch.state.replay import parse_lines, replay


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="isrwatch bench engine", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=1_000_000, help="events to generate (default 1,000,000)")
    parser.add_argument("--partitions", type=int, default=10_000, help="partitions, RF 3 (default 10,000)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", metavar="FILE", help="also keep the generated JSONL here")
    args = parser.parse_args(argv)
    config = Config(replica_lag_time_max_ms=10_000)
    shape = StreamShape(partitions=args.partitions)

    path = args.keep or os.path.join(tempfile.mkdtemp(prefix="isrwatch-bench-"), "events.jsonl")
    started = time.perf_counter()
    encode = msgspec.json.encode
    with open(path, "wb") as fh:
        for ev in generate(shape, args.events, args.seed):
            fh.write(encode(ev))
            fh.write(b"\n")
    size_mb = os.path.getsize(path) / 2**20
    print(
        f"generated {path}: {size_mb:,.0f} MiB in {time.perf_counter() - started:.1f} s "
        f"({args.partitions:,} partitions x RF 3, fetch every 500 ms, lag 10 s)"
    )

    with open(path, "rb") as fh:
        events, dead, lines = parse_lines([fh])
    print(f"parsed {lines:,} lines: {len(events):,} events, {len(dead)} dead letters")

    gc.collect()
    gc.disable()  # the engine allocates few long-lived objects; measure it, not the collector
    started = time.perf_counter()
    engine = PartitionEngine(config)
    engine.add(events)
    until = max(ev.ts for ev in events) + 1
    out = engine.advance(until)
    book = PropagationBook(config)
    book.add([*out.changes, *out.ticks])
    propagations = book.advance(until)
    engine_s = time.perf_counter() - started
    gc.enable()
    kinds: dict[str, int] = {}
    for d in out.decisions:
        kinds[str(d.kind)] = kinds.get(str(d.kind), 0) + 1
    print(
        f"engine:  {len(events) / engine_s:>10,.0f} events/s  ({len(events):,} events in {engine_s:.2f} s; "
        f"decisions {kinds}, {len(propagations)} propagation batches)"
    )

    blob = engine.to_bytes()
    per_partition = len(blob) / len(engine.partitions)
    del events, out, engine, book
    gc.collect()
    tracemalloc.start()
    with open(path, "rb") as fh:
        sample, _, _ = parse_lines([fh])
    probe = PartitionEngine(config)
    probe.add(sample)
    probe.advance(until)
    del sample
    gc.collect()
    in_memory = tracemalloc.get_traced_memory()[0] / len(probe.partitions)
    tracemalloc.stop()
    print(f"state:   {per_partition:,.0f} B/partition serialised (msgpack), {in_memory:,.0f} B/partition in memory")
    del probe
    gc.collect()

    started = time.perf_counter()
    with open(path, "rb") as fh:
        result = replay([fh], config)
    replay_s = time.perf_counter() - started
    print(
        f"replay:  {lines / replay_s:>10,.0f} events/s  (JSONL -> parse -> engine -> records, {replay_s:.2f} s; "
        f"{result.summary['decisions']} decisions)"
    )
    print(f"peak RSS {_rss_mb():,.0f} MiB")
    if not args.keep:
        os.remove(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
