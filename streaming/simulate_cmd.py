"""`isrwatch simulate`: the simulator's output side — pacing and the sinks (stdout, a directory, Kafka)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Protocol

import msgspec

from state.config import Config, ConfigError
from state.events import Event

from .simulator import (
    DEFAULT_TOPICS,
    SCENARIOS,
    Fault,
    SimConfig,
    TopicSpec,
    fault_from_dict,
    parse_duration,
    parse_fault,
    scenario,
    simulate_events,
    with_scenario,
)

DEFAULT_DURATION_MS = 120_000
DEFAULT_KAFKA_TOPIC = "isrwatch.events"


class Sink(Protocol):
    def write(self, ev: Event, line: bytes) -> None: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...


class StreamSink:
    """JSON lines to a binary stream (stdout)."""

    def __init__(self, stream) -> None:
        self.stream = stream

    def write(self, ev: Event, line: bytes) -> None:
        self.stream.write(line)

    def flush(self) -> None:
        self.stream.flush()

    def close(self) -> None:
        self.stream.flush()


class DirectorySink:
    """JSONL files rotating into a directory a file source watches.

    Each file is written under a hidden name (Spark's file source skips names starting with `.`) and
    renamed into place once complete, so a reader never sees half a file. A file covers `rotate_ms`
    of event time; names sort in time order and continue after the files already there.
    """

    def __init__(self, directory: Path, rotate_ms: int) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.rotate_ms = max(1, rotate_ms)
        numbers = [int(p.stem.split("-")[1]) for p in self.dir.glob("events-*.jsonl")
                   if p.stem.split("-")[1].isdigit()]
        self.number = max(numbers, default=0)
        self.fh = None
        self.first_ts = 0
        self.files = 0

    def _temp(self) -> Path:
        return self.dir / f".events-{self.number:08d}.jsonl.tmp"

    def write(self, ev: Event, line: bytes) -> None:
        if self.fh is not None and ev.ts - self.first_ts >= self.rotate_ms:
            self._publish()
        if self.fh is None:
            self.number += 1
            self.first_ts = ev.ts
            self.fh = open(self._temp(), "wb")  # noqa: SIM115 - kept open across writes, closed on rotation
        self.fh.write(line)

    def _publish(self) -> None:
        self.fh.close()
        self.fh = None
        os.replace(self._temp(), self.dir / f"events-{self.number:08d}.jsonl")
        self.files += 1

    def flush(self) -> None:
        """Nothing to do: a file becomes visible only whole, when its event-time span is over."""

    def close(self) -> None:
        if self.fh is not None:
            self._publish()


class KafkaSink:
    """Records to a Kafka topic, keyed by partition so each partition's events stay in order."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from kafka import KafkaProducer

        self.topic = topic
        self.producer = KafkaProducer(bootstrap_servers=bootstrap.split(","), linger_ms=20, acks=1)

    def write(self, ev: Event, line: bytes) -> None:
        key = f"{ev.topic}-{ev.partition}".encode()  # the simulator emits partition events only
        self.producer.send(self.topic, key=key, value=line[:-1])

    def flush(self) -> None:
        self.producer.flush()

    def close(self) -> None:
        self.producer.flush()
        self.producer.close()


class Pacer:
    """Holds each event back until its event time, scaled by `speed`, has come on the wall clock, and
    spaces events at most `rate` per second; speed 0 and no rate = as fast as possible."""

    def __init__(self, speed: float, rate: float | None, first_ts: int,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        self.speed = speed
        self.interval = 1 / rate if rate else 0.0
        self.first_ts = first_ts
        self.clock = clock
        self.sleep = sleep
        self.started = clock()
        self.next_free = self.started

    def due(self, ts: int) -> float:
        """Seconds until an event at `ts` may go (<= 0: now)."""
        at = self.next_free
        if self.speed > 0:
            at = max(at, self.started + (ts - self.first_ts) / 1000 / self.speed)
        self.next_free = max(at, self.clock()) + self.interval if self.interval else at
        return at - self.clock()


def run(events: Iterable[Event], sink: Sink, pacer: Pacer | None, stop: Callable[[], bool] = lambda: False) -> int:
    """Write events to the sink, paced; returns how many went out. Flushes before every wait."""
    encode = msgspec.json.Encoder().encode_into
    buf = bytearray()
    count = 0
    try:
        for ev in events:
            if pacer is not None:
                wait = pacer.due(ev.ts)
                if wait > 0.002:
                    sink.flush()
                    if stop():
                        break
                    pacer.sleep(wait)
            encode(ev, buf)
            buf.extend(b"\n")
            sink.write(ev, bytes(buf))
            count += 1
    finally:
        sink.close()
    return count


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scenario", choices=SCENARIOS,
                   help="a preset fault story, timed from the lag: " + "; ".join(
                       f"{name}: {scenario(name, Config()).description}" for name in SCENARIOS))
    p.add_argument("--fault", action="append", default=[], metavar="SPEC",
                   help="add a fault, e.g. stall:broker=2:start=30s:end=90s (repeatable; see below)")
    p.add_argument("--faults", metavar="FILE.json",
                   help='faults as a JSON list, e.g. [{"kind": "stall", "broker": 2, "start": "30s", "end": "90s"}]')
    p.add_argument("--seed", type=int, default=0, help="random seed: the same seed and start give the same events")
    p.add_argument("--brokers", type=int, default=4, help="number of brokers, ids 1..N (default 4)")
    p.add_argument("--topic", action="append", default=[], metavar="NAME:PARTITIONS:RF",
                   help="a topic (repeatable; default: " + ", ".join(
                       f"{t.name}:{t.partitions}:{t.replication_factor}" for t in DEFAULT_TOPICS) + ")")
    p.add_argument("--cluster", default="default", help="the events' cluster name (default: default)")
    p.add_argument("--duration", metavar="TIME",
                   help="event time to simulate, e.g. 90s or 10m; 0 = forever (default: the scenario's length, "
                        "else 2m)")
    p.add_argument("--start", default=None, metavar="MS|now",
                   help="event time of the start in epoch ms (default: now when paced, 0 with --speed 0, so that "
                        "the output depends on the seed only)")
    p.add_argument("--append-interval", default="200ms", metavar="TIME",
                   help="mean time between two producer batches of a partition (default 200ms)")
    p.add_argument("--config", metavar="FILE.json", help="the brokers' replica settings (SPEC §2 keys)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="one replica setting, e.g. replica_lag_time_max_ms=10000 (repeatable); "
                        "schedule_origin_ms defaults to the start (the brokers start with the simulation)")
    p.add_argument("--speed", type=float, default=1.0,
                   help="event time per wall-clock time: 1 = real time (default), 10 = ten times faster, "
                        "0 = as fast as possible")
    p.add_argument("--rate", type=float, metavar="EVENTS_PER_S", help="at most this many events per second")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--out-dir", metavar="DIR",
                     help="write JSONL files rotating into DIR (the streaming job's file source)")
    out.add_argument("--kafka", metavar="HOST:PORT[,...]", help="produce to Kafka at these bootstrap servers")
    p.add_argument("--kafka-topic", default=DEFAULT_KAFKA_TOPIC,
                   help=f"the topic to produce to (default {DEFAULT_KAFKA_TOPIC})")
    p.add_argument("--rotate", default="1s", metavar="TIME",
                   help="event time each file of --out-dir covers (default 1s)")


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
    sim = SimConfig(brokers=args.brokers, topics=topics or DEFAULT_TOPICS, cluster=args.cluster, start_ms=start,
                    duration_ms=DEFAULT_DURATION_MS, kafka=config,
                    append_interval_ms=max(1, parse_duration(args.append_interval, "--append-interval")))
    faults: list[Fault] = []
    if args.scenario:
        sim, faults = with_scenario(sim, args.scenario)
        if topics:  # the command line's topics win over the scenario's
            sim = replace(sim, topics=topics)
    if args.faults:
        try:
            raw = json.loads(Path(args.faults).read_text())
        except OSError as exc:
            raise ConfigError(f"--faults {args.faults}: {exc.strerror}") from None
        except json.JSONDecodeError as exc:
            raise ConfigError(f"--faults {args.faults}: not JSON ({exc.msg})") from None
        if not isinstance(raw, list) or not all(isinstance(f, dict) for f in raw):
            raise ConfigError(f"--faults {args.faults}: expected a JSON list of fault objects")
        faults += [fault_from_dict(f, args.brokers) for f in raw]
    faults += [parse_fault(text, args.brokers) for text in args.fault]
    if args.duration is not None:
        sim = replace(sim, duration_ms=parse_duration(args.duration, "--duration") or None)
    return sim, faults


def open_sink(args: argparse.Namespace) -> Sink:
    if args.out_dir:
        return DirectorySink(Path(args.out_dir), parse_duration(args.rotate, "--rotate"))
    if args.kafka:
        return KafkaSink(args.kafka, args.kafka_topic)
    return StreamSink(sys.stdout.buffer)


def main(args: argparse.Namespace) -> int:
    from .cli import load_config

    sim, faults = build(args, load_config(args.config, args.set))
    events = simulate_events(sim, faults, args.seed)
    sink = open_sink(args)
    k = sim.kafka
    print(f"isrwatch: simulating {sim.brokers} brokers, {sum(t.partitions for t in sim.topics)} partitions from "
          f"ts {sim.start_ms} for {'ever' if sim.duration_ms is None else f'{sim.duration_ms / 1000:g} s'}"
          f"{''.join(f'; {f}' for f in faults)}. Judge it with --set replica_lag_time_max_ms="
          f"{k.replica_lag_time_max_ms} --set schedule_origin_ms={k.schedule_origin_ms}", file=sys.stderr, flush=True)
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

