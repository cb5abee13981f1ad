"""`isrwatch bench engine`: events/s of the pure engine and of a whole replay, peak memory, state size.

Prints numbers; asserts nothing; the targets and the figures measured are in docs/performance.md.

The workload is the synthetic steady stream (`--generator synthetic`, ZooKeeper only: nothing answers an
AlterPartition proposal in it), or the simulator's cluster with broker 2's followers stalling in turn
(`--generator simulator`, the default with `--isr-protocol alter_partition`): the same events for either ISR
protocol but the leaders' writes, so the two modes compare. With AlterPartition the controller answers each
request after 20 ms and the timed pass drives the brokers' managers beside their propagation throttle.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import resource
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

import msgspec

from isrwatch.sim.config import SimConfig, TopicSpec
from isrwatch.sim.faults import Fault
from isrwatch.sim.model import simulate_events
from isrwatch.sim.synthetic import StreamShape, generate
from isrwatch.state.alter_partition import AlterPartitionBook
from isrwatch.state.config import ALTER_PARTITION, ISR_PROTOCOLS, ZOOKEEPER, Config
from isrwatch.state.engine import PartitionEngine
from isrwatch.state.propagation import PropagationBook
from isrwatch.state.replay import parse_lines, replay
from isrwatch.state.step import settle

GENERATORS = ("synthetic", "simulator")
SIM_LAG_MS = 2000  # short, so that a run of a few seconds of event time holds many shrinks and expands
SIM_KAFKA_VERSION = "3.9"  # the last release with both ISR protocols
DAY_MS = 86_400_000  # the stalls go on longer than any run


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def synthetic_stream(args: argparse.Namespace) -> tuple[Config, Iterator[Any], str]:
    """The synthetic steady stream: 20 stuck and 20 slow followers, lag 10 s, ZooKeeper leaders."""
    about = f"{args.partitions:,} partitions x RF 3, fetch every 500 ms, lag 10 s"
    return (
        Config(replica_lag_time_max_ms=10_000),
        generate(StreamShape(partitions=args.partitions), args.events, args.seed),
        about,
    )


def simulated_stream(args: argparse.Namespace) -> tuple[Config, Iterator[Any], str]:
    """The simulator's cluster (6 brokers, 10 topics, RF 3) from its start, broker 2's followers stalling one after
    another for longer than the lag (the `burst` fault), its leaders writing their ISR with `--isr-protocol`."""
    kafka = Config(replica_lag_time_max_ms=SIM_LAG_MS, kafka_version=SIM_KAFKA_VERSION, isr_protocol=args.isr_protocol)
    per_topic = -(-args.partitions // 10)
    topics = tuple(
        TopicSpec(f"topic-{t}", min(per_topic, args.partitions - t * per_topic), 3)
        for t in range(10)
        if t * per_topic < args.partitions
    )
    sim = SimConfig(
        brokers=6,
        topics=topics,
        cluster="bench",
        start_ms=1_700_000_000_000,
        duration_ms=None,
        kafka=kafka,
        append_interval_ms=1000,
    )
    events = itertools.islice(simulate_events(sim, [Fault("burst", 1000, DAY_MS, broker=2)], args.seed), args.events)
    about = (
        f"simulator, {args.isr_protocol}: {args.partitions:,} partitions x RF 3 on 6 brokers, appends every 1 s, "
        f"lag {SIM_LAG_MS / 1000:g} s, broker 2's followers stalling in turn"
        + (f", controller answers in {sim.alter_partition_latency_ms} ms" if kafka.alter_partition else "")
    )
    return kafka, events, about


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="isrwatch bench engine", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=1_000_000, help="events to generate (default 1,000,000)")
    parser.add_argument("--partitions", type=int, default=10_000, help="partitions, RF 3 (default 10,000)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", metavar="FILE", help="also keep the generated JSONL here")
    parser.add_argument(
        "--isr-protocol",
        choices=ISR_PROTOCOLS,
        default=ZOOKEEPER,
        help="how the leaders write their ISR (SPEC §2 isr_protocol; default zookeeper)",
    )
    parser.add_argument(
        "--generator",
        choices=GENERATORS,
        help="the workload: synthetic (default with zookeeper) or simulator (default with alter_partition)",
    )
    args = parser.parse_args(argv)
    if args.generator is None:
        args.generator = "simulator" if args.isr_protocol == ALTER_PARTITION else "synthetic"
    if args.generator == "synthetic" and args.isr_protocol == ALTER_PARTITION:
        parser.error("--generator synthetic: its stream has no controller to answer AlterPartition; use simulator")
    config, stream, about = (synthetic_stream if args.generator == "synthetic" else simulated_stream)(args)

    path = args.keep or os.path.join(tempfile.mkdtemp(prefix="isrwatch-bench-"), "events.jsonl")
    started = time.perf_counter()
    encode = msgspec.json.encode
    with open(path, "wb") as fh:
        for ev in stream:
            fh.write(encode(ev))
            fh.write(b"\n")
    size_mb = os.path.getsize(path) / 2**20
    print(f"generated {path}: {size_mb:,.0f} MiB in {time.perf_counter() - started:.1f} s ({about})")

    with open(path, "rb") as fh:
        events, dead, lines = parse_lines([fh])
    print(f"parsed {lines:,} lines: {len(events):,} events, {len(dead)} dead letters")

    gc.collect()
    gc.disable()  # the engine allocates few long-lived objects; measure it, not the collector
    started, cpu = time.perf_counter(), time.process_time()
    engine = PartitionEngine(config)
    engine.add(events)
    until = max(ev.ts for ev in events) + 1
    out = engine.advance(until)
    settled = settle(PropagationBook(config), [out], until, managers=AlterPartitionBook())
    engine_s, engine_cpu = time.perf_counter() - started, time.process_time() - cpu
    gc.enable()
    kinds: dict[str, int] = {}
    for d in out.decisions:
        kinds[str(d.kind)] = kinds.get(str(d.kind), 0) + 1
    requests = f", {len(settled.alter_partitions)} AlterPartition requests" if config.alter_partition else ""
    print(
        f"engine:  {len(events) / engine_s:>10,.0f} events/s  ({len(events):,} events in {engine_s:.2f} s; "
        f"decisions {kinds}, {len(settled.propagations)} propagation batches{requests})"
    )

    blob = engine.to_bytes()
    per_partition = len(blob) / len(engine.partitions)
    del events, out, engine, settled
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

    started, cpu = time.perf_counter(), time.process_time()
    with open(path, "rb") as fh:
        result = replay([fh], config)
    replay_s, replay_cpu = time.perf_counter() - started, time.process_time() - cpu
    requests = (
        f", {result.summary.get('alter_partition_requests', 0)} AlterPartition requests"
        if config.alter_partition
        else ""
    )
    print(
        f"replay:  {lines / replay_s:>10,.0f} events/s  (JSONL -> parse -> engine -> records, {replay_s:.2f} s; "
        f"{result.summary['decisions']} decisions{requests})"
    )
    # The machine may be shared: CPU time varies less than the wall clock.
    print(f"cpu:     engine {engine_cpu:.3f} s, replay {replay_cpu:.3f} s")
    print(f"peak RSS {_rss_mb():,.0f} MiB")
    if not args.keep:
        os.remove(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
