"""isrwatch against the session lab's brokers: what it stored, what the brokers logged, and how to compare them."""

from __future__ import annotations

import datetime
import re
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import msgspec

from isrwatch.lab.record import Lab
from isrwatch.lab.truth import PartitionState
from isrwatch.store import open_store
from tests.support.jobs import drain
from tests.support.lab import LAG_MS, FaultWindow, states
from tests.support.net import serving

SHRINKING = re.compile(
    r"^\[(?P<at>[\d-]+ [\d:,]+)\] INFO \[Partition (?P<topic>\S+)-(?P<partition>\d+) broker=(?P<broker>\d+)\] "
    r"Shrinking ISR from (?P<before>[\d,]+) to (?P<after>[\d,]+)\.",
    re.M,
)


@dataclass
class Reality:
    lab: Lab
    store: str
    windows: list[FaultWindow]
    frontier: int  # the store's event time for the lab's cluster: decided up to it
    events: list[dict]  # what the agents sent

    @property
    def settled(self) -> int:
        """Sides older than this have met their partner or were judged: past the audit window (the lag)."""
        return self.frontier - LAG_MS


def say(message: str) -> None:
    print(f"reality: {message}", file=sys.stderr, flush=True)


def stored(reality: Reality, what: str, **filters: object) -> list[dict]:
    """Every record of one store list (`decisions`, `observed`, ...) as JSON objects."""
    with open_store(reality.store) as store:
        return msgspec.to_builtins(drain(lambda **page: getattr(store, what)(**filters, **page)))


def in_window(ts: int, window: FaultWindow) -> bool:
    return window.start_ms <= ts <= window.end_ms


def _kind(divergence: dict) -> str:
    """A divergence's kind, with the rule that excused it for a timing one: `timing/split`."""
    return divergence["kind"] + (f"/{divergence['cause']}" if divergence.get("cause") else "")


def served(reality: Reality) -> Iterator[tuple[PartitionState, dict]]:
    """Every partition as the cluster has it now, with what `GET /v1/partitions/{t}/{p}/isr` serves for it."""
    with serving(reality.store) as base:
        for (topic, partition), state in sorted(states(reality.lab).items()):
            params = {"cluster": reality.lab.cluster}
            yield state, httpx.get(f"{base}/v1/partitions/{topic}/{partition}/isr", params=params).json()


def _log_ms(stamp: str) -> int:
    """server.log's local wall-clock stamp as epoch ms."""
    return int(datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp() * 1000)


def shrink_lines(reality: Reality) -> Counter[tuple[int, str, int, tuple[int, ...], tuple[int, ...]]]:
    """The settled `Shrinking ISR` lines of the brokers' server.log: (broker, topic, partition, ISR before, after)."""
    logged: Counter[tuple[int, str, int, tuple[int, ...], tuple[int, ...]]] = Counter()
    for broker in reality.lab.brokers:
        text = (Path(broker.kafka_logs_dir) / "server.log").read_text(errors="replace")
        for m in SHRINKING.finditer(text):
            if _log_ms(m["at"]) < reality.settled:
                before, after = (tuple(sorted(map(int, m[k].split(",")))) for k in ("before", "after"))
                logged[(int(m["broker"]), m["topic"], int(m["partition"]), before, after)] += 1
    return logged


BEFORE_MS, AFTER_MS = 15_000, 5_000  # `agent_events`: the window around a partition's divergences
NEAR_MS = 250  # ... and the fetches this close to one are shown one by one
FETCH_FIELDS = ("fetch_offset", "leader_leo", "current_leader_epoch", "broker_epoch")
QUIET = {"type", "ts", "cluster", "broker", "seq", "topic", "partition", "topic_id", "kafka_version", "replicas"}


def _line(ev: dict, where: tuple[str, int]) -> str:
    """One agent event of the partition `where` in a line (without its ts), with the fields the model reads."""
    if ev["type"] == "fetch":
        fields = " ".join(f"{f}={ev[f]}" for f in (*FETCH_FIELDS, "fetch_ms") if ev.get(f) is not None)
        return f"b{ev['broker']} fetch r{ev['replica']} {fields}"
    if ev["type"] == "alter_partition_sent":
        items = [
            {k: p.get(k) for k in ("isr", "leader_epoch", "partition_epoch")}
            for p in ev["partitions"]
            if (p.get("topic"), p["partition"]) == where
        ]
        return f"b{ev['broker']} alter_partition_sent broker_epoch={ev.get('broker_epoch')} {items}"
    fields = " ".join(f"{k}={v}" for k, v in ev.items() if k not in QUIET and v not in (None, []))
    return f"b{ev.get('broker')} {ev['type']} {fields}"


def _concerns(ev: dict, where: tuple[str, int], leaders: set[int]) -> bool:
    """Whether an agent event belongs in a partition's story: its own events, its leaders' checks, any registration."""
    if ev["type"] == "alter_partition_sent":
        return any((p.get("topic"), p["partition"]) == where for p in ev["partitions"])
    if ev["type"] == "tick":
        return ev.get("broker") in leaders and ev.get("task") == "isr-expiration"
    return ev["type"] == "broker_registration" or (ev.get("topic"), ev.get("partition")) == where


def _run(fetches: list[dict]) -> str:
    """A follower's fetches in a row with nothing else of the partition between them, in a line: first and last."""
    first, last = fetches[0], fetches[-1]
    caught = sum(f["fetch_offset"] >= f["leader_leo"] for f in fetches)
    return (
        f"b{first['broker']} {len(fetches)} fetches r{first['replica']} to {last['ts']} ({caught} caught up): "
        f"offset {first['fetch_offset']}..{last['fetch_offset']}, "
        f"leader_leo {first['leader_leo']}..{last['leader_leo']}, last fetch_ms {last.get('fetch_ms')}, "
        f"leader_epoch {last.get('current_leader_epoch')}"
    )


def _story(events: list[dict], where: tuple[str, int], leaders: set[int], near: list[int]) -> list[tuple[int, str]]:
    """The partition's agent events as (ts, line). A follower's fetches farther than NEAR_MS from every `near` time
    are folded into runs (`_run`) that any other event of the partition ends."""
    rows: list[tuple[int, str]] = []
    runs: dict[tuple[int, int], list[dict]] = {}  # (broker, replica) -> the fetches of its open run

    def close() -> None:
        rows.extend((run[0]["ts"], _run(run) if len(run) > 1 else _line(run[0], where)) for run in runs.values())
        runs.clear()

    for e in events:
        if not _concerns(e, where, leaders):
            continue
        if e["type"] == "fetch" and all(abs(e["ts"] - t) > NEAR_MS for t in near):
            runs.setdefault((e["broker"], e["replica"]), []).append(e)
            continue
        close()
        rows.append((e["ts"], _line(e, where)))
    close()
    return rows


def _stalls(events: list[dict], lo: int, hi: int) -> list[tuple[int, str]]:
    """Each broker's watermark gaps over 2 s (a stall, a restart) that end in `lo..hi`, as (ts, line)."""
    stamps: dict[int, list[int]] = {}
    for e in events:
        if e["type"] == "watermark" and e["ts"] <= hi:
            stamps.setdefault(e["broker"], []).append(e["ts"])
    return [
        (a, f"b{broker} watermarks stop for {b - a} ms")
        for broker, seen in stamps.items()
        for a, b in zip(seen, seen[1:], strict=False)
        if b - a > 2000 and b >= lo
    ]


def agent_events(reality: Reality, divergences: list[dict], max_lines: int = 300) -> str:
    """What a CI log needs to follow a divergence by hand, without the session's files: for each diverging
    partition, the agents' events of it from BEFORE_MS before its first divergence to AFTER_MS after its last
    (`_story`), with its leaders' isr-expiration runs, every registration, the brokers' stalls (`_stalls`) and the
    model's decisions of it."""
    by_partition: dict[tuple[str, int], list[dict]] = {}
    for d in divergences:
        if d["subject"] == "isr":
            by_partition.setdefault((d["topic"], d["partition"]), []).append(d)
    decisions = stored(reality, "decisions") if by_partition else []
    lines: list[str] = []
    for where, ds in sorted(by_partition.items()):
        lo, hi = min(d["ts"] for d in ds) - BEFORE_MS, max(d["ts"] for d in ds) + AFTER_MS
        events = [e for e in reality.events if lo <= e["ts"] <= hi]
        leaders = {d["broker"] for d in ds} | {
            e["leader"] for e in events if e["type"] == "leader_and_isr" and (e["topic"], e["partition"]) == where
        }
        rows = _story(events, where, leaders, [d["ts"] for d in ds]) + _stalls(reality.events, lo, hi)
        rows += [(d["ts"], f"model {d['kind']} {d['isr_before']} -> {d['isr_after']} (leader {d['leader']})")
                 for d in decisions if (d["topic"], d["partition"]) == where and lo <= d["ts"] <= hi]  # fmt: skip
        for d in ds:
            fields = ("isr_before", "isr", "partition_epoch")
            sides = {k: {f: d[k].get(f) for f in fields} for k in ("model", "observed") if d.get(k)}
            rows.append((d["ts"], f"DIVERGENCE {_kind(d)} {sides}"))
        lines.append(f"-- agent events of {where[0]}-{where[1]}, {lo}..{hi}:")
        lines += [f"  {ts} {text}" for ts, text in sorted(rows)]
    if len(lines) > max_lines:
        cut = len(lines) - max_lines
        lines = [*lines[: max_lines // 3], f"  ... {cut} lines left out ...", *lines[max_lines // 3 + cut :]]
    return "\n".join(lines)
