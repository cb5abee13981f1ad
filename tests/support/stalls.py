"""Agent-shaped input with a broker that stalls (SPEC §6, `frontier.holds_back`), for the core's property test
(tests/state/test_stalls.py) and the real Spark query's (tests/streaming/test_stalls_spark.py).

Three brokers, each leading a partition replicated on all three; leaders report their followers' fetches, appends and
isr-expiration runs, each stream bounded by the agent's watermarks and delivered at its own pace. One broker stalls
for longer than `allowed_lateness_ms` (6-12 s, as `isrwatch bench latency` and the demo stall one): it reports
nothing meanwhile, its followers stop fetching from it and it from its leaders, and what it emitted in the last
moments before the stall is delivered with the rest of its stream when it resumes (its agent's sender stopped with
the broker).
"""

from __future__ import annotations

import json
import random
from dataclasses import replace

import msgspec

from isrwatch.state.config import Config
from isrwatch.state.replay import ReplayResult

CLUSTER = "lab"
BROKERS = (1, 2, 3)
T0 = 1_000_000
MAX_DELAY_MS = 400  # how far a broker's delivery trails its emission, stalls aside
WATERMARK_EVERY_MS = 200  # the agent's default `watermark.interval.ms`
CONFIG = replace(Config(replica_lag_time_max_ms=3000), broker_rejoin_margin_ms=MAX_DELAY_MS).with_profile("agent")


def sort_time(ev: dict) -> int:
    """`events.sorts_at`: an isr-expiration tick at its run's end, an append at its check."""
    return max(ev["ts"], ev.get("end_ms") or 0, ev.get("check_ms") or 0)


def cluster_run(stalled: int, stall_at: int, stall_ms: int, steps: int, seed: int) -> dict[int, list[dict]]:
    """Each broker's stream, as its agent emitted it: every 100-300 ms each leader reports a fetch of each follower
    that is not stalled (and is not following a stalled leader), an append now and then, and every
    `replica_lag_time_max_ms / 2` its isr-expiration run; the stalled broker reports nothing during its stall."""
    rnd = random.Random(seed)
    streams: dict[int, list[dict]] = {b: [] for b in BROKERS}
    seq = dict.fromkeys(BROKERS, 0)
    leo = dict.fromkeys(BROKERS, 100)  # the LEO of the partition each broker leads (partition = broker - 1)
    fetched = {(b, f): 100 for b in BROKERS for f in BROKERS if f != b}

    def emit(broker: int, ev: dict) -> None:
        seq[broker] += 1
        streams[broker].append(ev | {"cluster": CLUSTER, "broker": broker, "seq": seq[broker]})

    for b in BROKERS:
        emit(b, {"type": "tick", "ts": T0, "task": "isr-expiration", "kafka_version": "3.9.2"})
        emit(b, {"type": "leader_and_isr", "ts": T0 + 1, "topic": "t", "partition": b - 1, "controller_epoch": 1}
             | {"leader": b, "leader_epoch": 0, "partition_epoch": 0, "isr": [1, 2, 3], "replicas": [1, 2, 3]}
             | {"leader_leo": 100, "hw": 100})  # fmt: skip
    t, next_run = T0 + 2, dict.fromkeys(BROKERS, T0 + 1500)
    for _ in range(steps):
        t += rnd.choice([100, 150, 200, 300])
        away = stall_at <= t < stall_at + stall_ms
        for b in BROKERS:
            if b == stalled and away:
                continue
            at = t + rnd.randint(0, 20)
            if rnd.random() < 0.4:
                leo[b] += rnd.randint(1, 5)
                emit(b, {"type": "append", "ts": at, "topic": "t", "partition": b - 1, "leader_leo": leo[b]})
            for f in BROKERS:
                if f != b and not (f == stalled and away):
                    fetched[(b, f)] = rnd.choice([fetched[(b, f)], leo[b]])
                    emit(b, {"type": "fetch", "ts": at + 1, "topic": "t", "partition": b - 1, "replica": f}
                         | {"fetch_offset": fetched[(b, f)], "leader_leo": leo[b]})  # fmt: skip
            if at >= next_run[b]:
                emit(b, {"type": "tick", "ts": at + 2, "task": "isr-expiration", "end_ms": at + 4})
                next_run[b] = at + CONFIG.replica_lag_time_max_ms // 2
    return streams


def with_watermarks(stream: list[dict], slack: int = 0) -> list[tuple[int, dict]]:
    """(emitted at, event) of a broker's stream, in its emission order, with its agent's watermarks: every
    `WATERMARK_EVERY_MS` of emission time, one at the least `ts` of every later event (what the agent promises),
    less `slack`, advancing only. A silent broker sends none (it sends nothing)."""
    later = [2**62] * (len(stream) + 1)
    for i in range(len(stream) - 1, -1, -1):
        later[i] = min(later[i + 1], stream[i]["ts"])
    out: list[tuple[int, dict]] = []
    next_mark, last = -1, -1
    for i, ev in enumerate(stream):
        emitted = sort_time(ev)
        out.append((emitted, ev))
        mark = min(later[i + 1], emitted) - slack
        if emitted >= next_mark and i + 1 < len(stream) and mark > last:
            out.append((emitted, {"type": "watermark", "ts": mark, "cluster": CLUSTER, "broker": ev["broker"]}))
            next_mark, last = emitted + WATERMARK_EVERY_MS, mark
    return out


def delivered(
    streams: dict[int, list[dict]], stalled: int, stall_at: int, stall_ms: int, caught: int, seed: int
) -> list[bytes]:
    """The events topic's order: each broker's stream in its own order, trailing its emission by a random walk in
    [0, MAX_DELAY_MS]; what the stalled broker emitted in the last `caught` ms before its stall waits with it and goes
    out when it resumes (its agent's sender stopped with the broker)."""
    rnd = random.Random(seed)
    items: list[tuple[int, int, int, dict]] = []
    for broker, stream in streams.items():
        delay, last = 0, -1
        for i, (emitted, ev) in enumerate(with_watermarks(stream)):
            delay = min(MAX_DELAY_MS, max(0, delay + rnd.randint(-100, 100)))
            out = emitted + delay
            if broker == stalled and stall_at - caught <= emitted < stall_at:
                out = stall_at + stall_ms + delay
            last = max(last, out)
            items.append((last, broker, i, ev))
    items.sort(key=lambda item: item[:3])
    return [json.dumps(ev).encode() for *_, ev in items]


def outputs(result: ReplayResult) -> dict[str, list[str]]:
    """What the engine produced, as sorted JSON texts."""
    rows = {"decisions": result.decisions, "records": result.records, "observed": result.observed}
    return {name: sorted(msgspec.json.encode(r).decode() for r in found) for name, found in rows.items()}


def stall_lines(stalled: int, stall_ms: int, caught: int, seed: int) -> list[bytes]:
    """The events topic of a run in which `stalled` stops for `stall_ms`, 4 s in, its last `caught` ms delayed."""
    stall_at = T0 + 4000
    streams = cluster_run(stalled, stall_at, stall_ms, 110, seed)
    return delivered(streams, stalled, stall_at, stall_ms, caught, seed)


def late_letters(result: ReplayResult) -> list[dict]:
    """The events dead-lettered as late."""
    return [json.loads(d.raw) for d in result.dead_letters if d.category == "late"]
