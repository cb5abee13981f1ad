"""Generated input for the streaming tests: the simulator's realistic stream (`isrwatch.sim.synthetic`), made harder
and cut into files.

On top of the steady fetch/append cadence with stuck and slow followers, a stream gets a second
cluster, leader changes (each leaving a follower out of the ISR, so it expands back), explicit
ticks of every kind, invalid and blank lines, events without `seq` (their line number decides
ties), and arrival out of order by less than the allowed lateness — so every event stays on time
in the sense of SPEC §6 however the files are cut into micro-batches.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from isrwatch.sim.synthetic import StreamShape, generate

START_MS = 1_700_000_000_000
INVALID = [
    "not json at all",
    '{"type": "fetch", "ts": %d, "topic": "t", "partition": 0, "fetch_offset": 1, "leader_leo": 2}',  # no replica
    '{"type": "append", "ts": %d, "topic": "bad topic!", "partition": 0, "leader_leo": 5}',
    '{"type": "fetch", "ts": -%d}',
    '{"type": "teleport", "ts": %d}',
    '{"type": "tick", "ts": %d, "task": "coffee"}',  # every bucket gets it; one dead letter
    "[1, 2, 3]",
]


@dataclass(frozen=True)
class Mix:
    partitions: int = 120  # split over two clusters
    events: int = 20_000
    lateness_ms: int = 3000  # arrival jitter stays below it
    leader_changes: int = 8
    ticks: int = 10
    invalid: int = 12
    seed: int = 11


def events(mix: Mix) -> list[dict | str]:
    """Events in arrival order (dicts), with invalid lines (str) and blank lines ("") among them."""
    rng = random.Random(mix.seed)
    half = mix.partitions // 2
    shapes = [
        StreamShape(
            partitions=half, brokers=5, topics=3, stuck_followers=3, slow_followers=3, start_ms=START_MS, cluster="east"
        ),
        StreamShape(
            partitions=mix.partitions - half,
            brokers=4,
            topics=2,
            stuck_followers=2,
            slow_followers=2,
            start_ms=START_MS + 137,
            cluster="west",
        ),
    ]
    stream: list[dict] = []
    for i, shape in enumerate(shapes):
        stream += generate(shape, mix.events // 2, mix.seed + i)
    end = max(ev["ts"] for ev in stream)
    firsts = [ev for ev in stream if ev["type"] == "leader_and_isr"]
    for first in rng.sample(firsts, mix.leader_changes):
        leader, out = first["replicas"][1], first["replicas"][-1]
        stream.append(
            {
                **first,
                "ts": rng.randrange(START_MS + 3000, end),
                "leader": leader,
                "leader_epoch": 1,
                "isr": [r for r in first["replicas"] if r != out],
                "partition_epoch": 1,
            }
        )
    for _ in range(mix.ticks):
        tick = {"type": "tick", "ts": rng.randrange(START_MS, end)}
        task = rng.choice([None, "isr-expiration", "isr-change-propagation"])
        if task:
            tick["task"] = task
        if rng.random() < 0.5:
            tick["cluster"] = rng.choice(["east", "west", "nowhere"])
        stream.append(tick)
    for ev in stream:
        if rng.random() < 0.3:  # a missing seq is the line number: ties then depend on the file cut
            ev.pop("seq", None)
    # Out of order by less than the lateness: each event arrives within that long after its time.
    arrival = sorted(stream, key=lambda ev: ev["ts"] + rng.randrange(mix.lateness_ms))
    lines: list[dict | str] = list(arrival)
    for _ in range(mix.invalid):
        at = rng.randrange(len(lines))
        near = lines[at]["ts"] if isinstance(lines[at], dict) else START_MS
        template = rng.choice(INVALID)
        lines.insert(at, template % near if "%d" in template else template)
        lines.insert(rng.randrange(len(lines)), "")
    return lines


def in_order(paths: Sequence[Path]) -> None:
    """Modification times one second apart, in the past: Spark's file source reads files oldest first."""
    base = time.time() - 60 - len(paths)
    for i, path in enumerate(paths):
        os.utime(path, (base + i, base + i))


def write_files(lines: Sequence[dict | str], directory: Path, files: int) -> list[Path]:
    """Cut lines into `files` JSONL files, in order by name and by modification time."""
    directory.mkdir(parents=True, exist_ok=True)
    per = -(-len(lines) // files)
    paths = []
    for i in range(files):
        path = directory / f"events-{i:03d}.jsonl"
        chunk = lines[i * per : (i + 1) * per]
        path.write_text("".join((json.dumps(x) if isinstance(x, dict) else x) + "\n" for x in chunk))
        paths.append(path)
    in_order(paths)
    return paths
