"""`isrwatch bench api`: the API over a store of 100,000 partitions, on loopback. Prints numbers; asserts nothing.

The targets and the figures measured are in docs/performance.md. The store is filled through the real
pipeline (generated events -> replay -> Store.write_batch); the server is `isrwatch serve` in its
own process (one uvicorn worker) and the load comes from an open-loop asyncio client on keep-alive
connections: requests leave on a fixed schedule and each latency counts from its scheduled start,
so a server that falls behind is charged for the queueing too.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import subprocess
import sys
import tempfile
import time

import msgspec

from isrwatch.sim.synthetic import StreamShape, generate
from isrwatch.state.config import Config
from isrwatch.state.replay import replay
from isrwatch.store import open_store

from .measure import Http, free_port, percentile


def fill(url: str, partitions: int, seed: int) -> tuple[list[tuple[str, int]], int]:
    """Replay a generated fleet into the store: LeaderAndIsr for every partition, then ~2 s of fetches and
    appends. Every 50th partition has a follower that is down (out of its ISR and not fetching)."""
    shape = StreamShape(partitions=partitions, cluster="bench")
    lines: list[bytes] = []
    down: set[tuple[str, int, int]] = set()
    for i, ev in enumerate(generate(shape, 7 * partitions, seed)):
        if ev["type"] == "leader_and_isr" and i % 50 == 0:
            ev["isr"] = ev["replicas"][:-1]
            down.add((ev["topic"], ev["partition"], ev["replicas"][-1]))
        elif ev["type"] == "fetch" and (ev["topic"], ev["partition"], ev["replica"]) in down:
            continue
        lines.append(msgspec.json.encode(ev))
    started = time.perf_counter()
    result = replay([lines], Config(replica_lag_time_max_ms=10_000))
    with open_store(url) as store:
        last = store.last_batch_id()
        store.write_batch(0 if last is None else last + 1, result, watermark_ms=result.summary["until"] + 1)
    print(
        f"store:   {len(result.records):,} partitions, {len(result.decisions):,} decisions from {len(lines):,} "
        f"events (replay + write {time.perf_counter() - started:.1f} s)"
    )
    return [(s.topic, s.partition) for s in result.records], sum(s.under_replicated for s in result.records)


def existing(url: str) -> tuple[list[tuple[str, int]], int]:
    """The partitions of a store filled before (a second run measures a settled database)."""
    keys, under_replicated, after = [], 0, None
    with open_store(url) as store:
        while True:
            page = store.partitions(after=after, limit=1000)
            keys += [(r["topic"], r["partition"]) for r in page.items]
            under_replicated += sum(r["under_replicated"] for r in page.items)
            if page.next_key is None:
                break
            after = page.next_key
    print(f"store:   {len(keys):,} partitions already there")
    return keys, under_replicated


def _serve(url: str, port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "isrwatch.cli", "serve", "--store", url, "--port", str(port), "--log-level", "warning"]
    )
    deadline = time.monotonic() + 60
    with Http(f"http://127.0.0.1:{port}", timeout=1) as api:
        while time.monotonic() < deadline:
            try:
                api.get("/healthz")
                return proc
            except OSError:
                time.sleep(0.1)
    proc.kill()
    raise SystemExit("isrwatch serve did not start")


def _quantiles(ms: list[float]) -> str:
    return (
        f"p50 {percentile(ms, 50):.2f} ms, p90 {percentile(ms, 90):.2f} ms, p99 {percentile(ms, 99):.2f} ms, "
        f"max {max(ms):.2f} ms"
    )


async def _get(conn: tuple[asyncio.StreamReader, asyncio.StreamWriter], path: str) -> int:
    """One keep-alive HTTP/1.1 GET; returns the status. A bare client, so the load generator's own CPU
    (on the same 2 cores as the server) distorts the figures as little as possible."""
    reader, writer = conn
    writer.write(f"GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
    await reader.readexactly(length)
    return int(head[9:12])


async def _load(
    host: str, port: int, paths: list[str], rate: float, seconds: float, connections: int = 32
) -> tuple[list[float], int, float]:
    """Open-loop load: request k is due at start + k/rate and its latency counts from then, including any
    wait for a free connection (so queueing behind a slow reply is charged, not hidden)."""
    free: asyncio.Queue = asyncio.Queue()
    for _ in range(connections):
        conn = await asyncio.open_connection(host, port)
        for path in paths[:4]:  # warm the connection and the server's thread-local store connections
            await _get(conn, path)
        free.put_nowait(conn)
    latencies: list[float] = []
    errors = 0

    async def one(k: int, due: float) -> None:
        nonlocal errors
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        conn = await free.get()
        if await _get(conn, paths[k % len(paths)]) != 200:
            errors += 1
        latencies.append((time.perf_counter() - due) * 1000)
        free.put_nowait(conn)

    total = int(rate * seconds)
    start = time.perf_counter() + 0.2
    await asyncio.gather(*(one(k, start + k / rate) for k in range(total)))
    achieved = total / (time.perf_counter() - start)
    while not free.empty():
        free.get_nowait()[1].close()
    return latencies, errors, achieved


def _timed(client: Http, path: str, n: int) -> list[float]:
    out = []
    for _ in range(n):
        started = time.perf_counter()
        client.get(path)
        out.append((time.perf_counter() - started) * 1000)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="isrwatch bench api", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--partitions", type=int, default=100_000, help="partitions in the store (default 100,000)")
    parser.add_argument(
        "--store", metavar="URL", help="store to serve, filled first if empty (default: a new SQLite file)"
    )
    parser.add_argument("--rate", type=float, default=500, help="GET .../isr requests per second (default 500)")
    parser.add_argument("--seconds", type=float, default=20, help="length of the load run (default 20)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    url = args.store or f"sqlite:///{os.path.join(tempfile.mkdtemp(prefix='isrwatch-bench-api-'), 'isrwatch.db')}"
    with open_store(url) as store:
        filled = store.last_batch_id() is not None
    keys, under_replicated = existing(url) if filled else fill(url, args.partitions, args.seed)
    port = free_port()
    proc = _serve(url, port)
    base = f"http://127.0.0.1:{port}"
    try:
        rng = random.Random(args.seed)
        paths = [f"/v1/partitions/{t}/{p}/isr?cluster=bench" for t, p in rng.sample(keys, min(len(keys), 20_000))]
        latencies, errors, achieved = asyncio.run(_load("127.0.0.1", port, paths, args.rate, args.seconds))
        print(
            f"isr:     {len(latencies):,} requests at {achieved:,.0f}/s (target {args.rate:g}/s), {errors} errors; "
            f"{_quantiles(latencies)}"
        )
        with Http(base, timeout=30) as client:
            metrics = _timed(client, "/metrics", 20)
            size = len(client.get("/metrics"))
            print(f"metrics: {_quantiles(metrics)} ({size:,} bytes)")
            first_page = _timed(client, "/v1/partitions?state=under_replicated", 50)
            print(f"under_replicated first page (100 of {under_replicated:,}): {_quantiles(first_page)}")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
