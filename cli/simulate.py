"""Simulate a Kafka cluster: its fetch, append and LeaderAndIsr events, with scripted faults.

A deterministic simulated cluster (brokers, producers, follower fetchers, the controller) emitting SPEC §3
events in real time or as fast as possible, to stdout, rotating JSONL files (--out-dir) or Kafka (--kafka),
with faults from --scenario and --fault.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

from isrwatch.sim.config import DEFAULT_TOPICS, SimConfig, TopicSpec
from isrwatch.sim.faults import FAULT_HELP, SCENARIOS, Fault, fault_from_dict, parse_duration, parse_fault, scenario
from isrwatch.sim.model import simulate_events, with_scenario
from isrwatch.sim.pacing import Pacer, run
from isrwatch.sim.sinks import DirectorySink, KafkaSink, Sink, StreamSink
from isrwatch.state.config import ALTER_PARTITION, ISR_PROTOCOLS, Config, ConfigError
from isrwatch.state.events import DEFAULT_CLUSTER
from isrwatch.streaming.producer import JsonProducer

from .common import add_config_arguments, command, load_config, read_json_file

DEFAULT_DURATION_MS = 120_000
DEFAULT_KAFKA_TOPIC = "isrwatch.events"


def add_parser(sub: argparse._SubParsersAction) -> None:
    add_arguments(command(sub, "simulate", __doc__, main, epilog=FAULT_HELP))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--scenario",
        choices=SCENARIOS,
        help="a preset fault story, timed from the lag: "
        + "; ".join(f"{name}: {scenario(name, Config()).description}" for name in SCENARIOS),
    )
    p.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="SPEC",
        help="add a fault, e.g. stall:broker=2:start=30s:end=90s (repeatable; see below)",
    )
    p.add_argument(
        "--faults",
        metavar="FILE.json",
        help='faults as a JSON list, e.g. [{"kind": "stall", "broker": 2, "start": "30s", "end": "90s"}]',
    )
    p.add_argument("--seed", type=int, default=0, help="random seed: the same seed and start give the same events")
    p.add_argument("--brokers", type=int, default=4, help="number of brokers, ids 1..N (default 4)")
    p.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="NAME:PARTITIONS:RF",
        help="a topic (repeatable; default: "
        + ", ".join(f"{t.name}:{t.partitions}:{t.replication_factor}" for t in DEFAULT_TOPICS)
        + ")",
    )
    p.add_argument("--cluster", default=DEFAULT_CLUSTER, help=f"the events' cluster name (default: {DEFAULT_CLUSTER})")
    p.add_argument(
        "--duration",
        metavar="TIME",
        help="event time to simulate, e.g. 90s or 10m; 0 = forever (default: the scenario's length, else 2m)",
    )
    p.add_argument(
        "--start",
        default=None,
        metavar="MS|now",
        help="event time of the start in epoch ms (default: now when paced, 0 with --speed 0, so that "
        "the output depends on the seed only)",
    )
    p.add_argument(
        "--append-interval",
        default="200ms",
        metavar="TIME",
        help="mean time between two producer batches of a partition (default 200ms)",
    )
    p.add_argument(
        "--isr-protocol",
        choices=ISR_PROTOCOLS,
        help="how the leaders write their ISR: zookeeper (the default) or alter_partition (KIP-497: a proposal to "
        "the controller, answered after --controller-latency; the Kafka version defaults to 3.9 then)",
    )
    p.add_argument(
        "--controller-latency",
        default="20ms",
        metavar="TIME",
        help="with alter_partition: how long the controller takes to answer a request (default 20ms)",
    )
    add_config_arguments(
        p,
        "the brokers' replica settings (SPEC §2 keys)",
        "one replica setting, e.g. replica_lag_time_max_ms=10000 (repeatable); "
        "schedule_origin_ms defaults to the start (the brokers start with the simulation)",
    )
    p.add_argument(
        "--speed",
        type=float,
        default=1.0,
        help="event time per wall-clock time: 1 = real time (default), 10 = ten times faster, 0 = as fast as possible",
    )
    p.add_argument("--rate", type=float, metavar="EVENTS_PER_S", help="at most this many events per second")
    out = p.add_mutually_exclusive_group()
    out.add_argument(
        "--out-dir", metavar="DIR", help="write JSONL files rotating into DIR (the streaming job's file source)"
    )
    out.add_argument("--kafka", metavar="HOST:PORT[,...]", help="produce to Kafka at these bootstrap servers")
    p.add_argument(
        "--kafka-topic", default=DEFAULT_KAFKA_TOPIC, help=f"the topic to produce to (default {DEFAULT_KAFKA_TOPIC})"
    )
    p.add_argument(
        "--rotate", default="1s", metavar="TIME", help="event time each file of --out-dir covers (default 1s)"
    )


def build(args: argparse.Namespace, config: Config) -> tuple[SimConfig, list[Fault]]:
    """The simulated cluster and fault script the options describe."""
    if args.speed < 0:
        raise ConfigError("--speed: must be >= 0")
    if args.start in (None, "now"):
        start = int(time.time() * 1000) if args.speed > 0 else 0
    else:
        start = int(args.start) if str(args.start).isdigit() else None
        if start is None:
            raise ConfigError(f"--start {args.start!r}: expected epoch ms or now")
    topics = tuple(TopicSpec.parse(t) for t in args.topic)
    if not any(s.startswith("schedule_origin_ms=") for s in args.set):
        config = config.with_overrides([f"schedule_origin_ms={start}"])
    config = with_isr_protocol(config, args.isr_protocol, args.set)
    sim = SimConfig(
        brokers=args.brokers,
        topics=topics or DEFAULT_TOPICS,
        cluster=args.cluster,
        start_ms=start,
        duration_ms=DEFAULT_DURATION_MS,
        kafka=config,
        append_interval_ms=max(1, parse_duration(args.append_interval, "--append-interval")),
        alter_partition_latency_ms=max(1, parse_duration(args.controller_latency, "--controller-latency")),
    )
    faults: list[Fault] = []
    if args.scenario:
        sim, faults = with_scenario(sim, args.scenario)
        if topics:  # the command line's topics win over the scenario's
            sim = replace(sim, topics=topics)
    if args.faults:
        raw = read_json_file(args.faults, "--faults")
        if not isinstance(raw, list) or not all(isinstance(f, dict) for f in raw):
            raise ConfigError(f"--faults {args.faults}: expected a JSON list of fault objects")
        faults += [fault_from_dict(f, args.brokers) for f in raw]
    faults += [parse_fault(text, args.brokers) for text in args.fault]
    if args.duration is not None:
        sim = replace(sim, duration_ms=parse_duration(args.duration, "--duration") or None)
    return sim, faults


def with_isr_protocol(config: Config, protocol: str | None, sets: list[str]) -> Config:
    """`config` with the brokers' ISR protocol; AlterPartition came in 2.7, so its Kafka version defaults to 3.9."""
    if protocol is None:
        return config
    if protocol == ALTER_PARTITION and not any(s.startswith("kafka_version=") for s in sets):
        return replace(config, kafka_version="3.9", isr_protocol=protocol)
    return config.for_broker(config.kafka_version, protocol)


def judge_protocol(kafka: Config) -> str:
    """The `--set` options that judge AlterPartition leaders with their Kafka version and protocol."""
    return f" --set kafka_version='\"{kafka.kafka_version}\"' --set isr_protocol='\"{kafka.isr_protocol}\"'"


def open_sink(args: argparse.Namespace) -> Sink:
    if args.out_dir:
        return DirectorySink(Path(args.out_dir), parse_duration(args.rotate, "--rotate"))
    if args.kafka:
        return KafkaSink(JsonProducer(args.kafka, acks=1), args.kafka_topic)
    return StreamSink(sys.stdout.buffer)


def main(args: argparse.Namespace) -> int:
    sim, faults = build(args, load_config(args.config, args.set, args.profile))
    events = simulate_events(sim, faults, args.seed)
    sink = open_sink(args)
    k = sim.kafka
    print(
        f"isrwatch: simulating {sim.brokers} brokers, {sum(t.partitions for t in sim.topics)} partitions from "
        f"ts {sim.start_ms} for {'ever' if sim.duration_ms is None else f'{sim.duration_ms / 1000:g} s'}"
        f"{''.join(f'; {f}' for f in faults)}. Judge it with --set replica_lag_time_max_ms="
        f"{k.replica_lag_time_max_ms} --set schedule_origin_ms={k.schedule_origin_ms}"
        + (judge_protocol(k) if k.alter_partition else ""),
        file=sys.stderr,
        flush=True,
    )
    pacer = Pacer(args.speed, args.rate, sim.start_ms) if args.speed > 0 or args.rate else None
    started = time.perf_counter()
    try:
        count = run(events, sink, pacer)
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, like other filters
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    elapsed = time.perf_counter() - started
    print(f"isrwatch: {count:,} events in {elapsed:.1f} s", file=sys.stderr, flush=True)
    return 0
