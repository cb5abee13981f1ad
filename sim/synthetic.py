"""A synthetic steady stream: the fast, deterministic traffic benchmarks and parity tests are built on.

Partitions with RF replicas, producers appending to leaders, followers fetching every
`fetch_interval_ms` the way Kafka followers do (fetch_offset = the follower's LEO, which is the
leader's LEO at its previous fetch), plus a few stuck followers (stop fetching) and slow followers
(fetch, but only part of the new data per fetch, so never catch up).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class ClusterShape:
    """What every generated stream is sized by: its partitions (RF replicas, spread over topics and brokers), how
    often followers fetch, how many of them get stuck (stop fetching), and the cluster's name and start time."""

    partitions: int = 10_000
    rf: int = 3
    brokers: int = 6
    topics: int = 10
    fetch_interval_ms: int = 500  # how often a follower fetches (replica.fetch.wait.max.ms on an idle partition)
    stuck_followers: int = 20
    start_ms: int = 1_700_000_000_000
    cluster: str = "bench"


@dataclass(frozen=True)
class StreamShape(ClusterShape):
    append_interval_ms: int = 1000
    slow_followers: int = 20


def generate(shape: StreamShape, events: int, seed: int = 7) -> Iterator[dict]:
    """Yield about `events` SPEC §3 event dicts in (ts, seq) order."""
    rng = random.Random(seed)
    per_topic = -(-shape.partitions // shape.topics)
    parts = []
    for i in range(shape.partitions):
        leader = i % shape.brokers
        replicas = [(leader + k) % shape.brokers for k in range(shape.rf)]
        parts.append(
            {
                "topic": f"topic-{i // per_topic}",
                "partition": i % per_topic,
                "leader": leader,
                "replicas": replicas,
                "leo": rng.randrange(1000, 100_000),
                "fetch_phase": rng.randrange(shape.fetch_interval_ms),
                "append_phase": rng.randrange(shape.append_interval_ms),
                "followers": {r: None for r in replicas[1:]},
            }
        )
    faulty = rng.sample(
        [(i, r) for i, p in enumerate(parts) for r in p["replicas"][1:]], shape.stuck_followers + shape.slow_followers
    )
    stuck = set(faulty[: shape.stuck_followers])
    slow = set(faulty[shape.stuck_followers :])
    stuck_from = shape.start_ms + 2_000
    seq = 0
    t0 = shape.start_ms
    window: list[tuple[int, int, dict]] = []
    for p in parts:
        seq += 1
        ev = {
            "type": "leader_and_isr",
            "ts": t0,
            "cluster": shape.cluster,
            "topic": p["topic"],
            "partition": p["partition"],
            "controller_epoch": 1,
            "leader": p["leader"],
            "leader_epoch": 0,
            "isr": p["replicas"],
            "replicas": p["replicas"],
            "partition_epoch": 0,
            "leader_leo": p["leo"],
            "seq": seq,
        }
        for r in p["followers"]:
            p["followers"][r] = p["leo"]
        yield ev
    emitted = len(parts)
    w = t0 + 1
    step = shape.fetch_interval_ms
    while emitted < events:
        window.clear()
        for i, p in enumerate(parts):
            base = {"cluster": shape.cluster, "topic": p["topic"], "partition": p["partition"]}
            if (w // step) % max(1, shape.append_interval_ms // step) == 0:
                ts = w + p["append_phase"] % step
                p["leo"] += rng.randrange(1, 200)
                window.append((ts, 0, {"type": "append", "ts": ts, **base, "leader_leo": p["leo"]}))
            for r, offset in p["followers"].items():
                ts = w + (p["fetch_phase"] + 97 * r) % step
                if (i, r) in stuck and ts >= stuck_from:
                    continue
                window.append(
                    (
                        ts,
                        1,
                        {
                            "type": "fetch",
                            "ts": ts,
                            **base,
                            "replica": r,
                            "fetch_offset": offset,
                            "leader_leo": p["leo"],
                        },
                    )
                )
                # The follower's next fetch asks from what this one returned: everything, or a slice if slow.
                p["followers"][r] = offset + (p["leo"] - offset) // 4 if (i, r) in slow else p["leo"]
        window.sort(key=lambda item: (item[0], item[1]))
        for _, _, ev in window:
            seq += 1
            ev["seq"] = seq
            yield ev
        emitted += len(window)
        w += step
