"""A small two-cluster fleet run through the real engine into a store, batch by batch like the streaming sink.

Cluster "east" starts at S; its stuck and slow followers fall out of the ISR at S+15000 and the
leader brokers hold those changes until their batch at S+22500. Cluster "west" starts 13 s later,
so at the end its stuck and slow followers are still in the ISR, near their lag limit. On top of
the generated traffic: one east partition goes offline, one is re-elected with a one-replica ISR
and its followers expand back, one stale LeaderAndIsr is rejected, and two lines are not events.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import msgspec
from fastapi.testclient import TestClient

from isrwatch.sim.synthetic import StreamShape, generate
from isrwatch.state.config import Config
from isrwatch.state.engine import PartitionEngine
from isrwatch.state.events import DeadLetter, Event, parse_event
from isrwatch.state.incidents import IncidentBook
from isrwatch.state.partition import partition_record
from isrwatch.state.propagation import PropagationBook
from isrwatch.state.records import shrink_predicted
from isrwatch.state.step import by_reason, settle
from isrwatch.store import Store

S = 1_700_000_000_000
CONFIG = Config(replica_lag_time_max_ms=10_000, min_insync_replicas=2, schedule_origin_ms=S)
EAST = StreamShape(partitions=24, brokers=6, topics=3, stuck_followers=2, slow_followers=2, start_ms=S, cluster="east")
WEST = StreamShape(
    partitions=12, brokers=4, topics=2, stuck_followers=1, slow_followers=1, start_ms=S + 13_000, cluster="west"
)
END = S + 24_000
NOW = END + 1  # the last batch's watermark: event-time "now" for every derived value
# The batches a streaming sink would commit: settled watermarks (exclusive upper bounds).
CUTS = (S + 9_000, S + 21_000, S + 23_000, END + 1)
OFFLINE = ("topic-1", 2)  # east: leader -1 from S+20000
REELECTED = ("topic-2", 5)  # east: same leader, ISR = [leader] at S+19500, followers expand back
BAD_LINES = [b'{"type": "fetch", "ts": 5', b'{"type": "append", "ts": 1700000001000, "topic": "t"}']


def _extra(lai_by_key: dict[tuple[str, int], dict]) -> list[dict]:
    offline = lai_by_key[OFFLINE]
    reelected = lai_by_key[REELECTED]
    common = {"type": "leader_and_isr", "cluster": "east", "controller_epoch": 1}
    return [
        {
            **common,
            "ts": S + 19_500,
            "topic": REELECTED[0],
            "partition": REELECTED[1],
            "leader": reelected["leader"],
            "leader_epoch": 1,
            "isr": [reelected["leader"]],
            "replicas": reelected["replicas"],
            "partition_epoch": 3,
        },
        {
            **common,
            "ts": S + 20_500,
            "topic": REELECTED[0],
            "partition": REELECTED[1],
            "leader": reelected["leader"],
            "leader_epoch": 1,
            "isr": reelected["replicas"],
            "replicas": reelected["replicas"],
            "partition_epoch": 4,
        },
        {
            **common,
            "ts": S + 20_000,
            "topic": OFFLINE[0],
            "partition": OFFLINE[1],
            "leader": -1,
            "leader_epoch": 1,
            "isr": [],
            "replicas": offline["replicas"],
            "partition_epoch": 5,
        },
    ]


def fleet_lines() -> list[bytes]:
    """The fleet's input as JSONL lines in time order, ending at END."""
    events = [ev for shape in (EAST, WEST) for ev in generate(shape, 40_000) if ev["ts"] <= END]
    first_lai = {
        (ev["topic"], ev["partition"]): ev
        for ev in events
        if ev["type"] == "leader_and_isr" and ev["cluster"] == "east"
    }
    events += _extra(first_lai)
    events.sort(key=lambda ev: ev["ts"])
    lines = [msgspec.json.encode({k: v for k, v in ev.items() if k != "seq"}) for ev in events]
    return lines[:100] + BAD_LINES + lines[100:]


@dataclass
class Streamed:
    """Everything the fleet produced, as the JSON the API serves (SPEC §5), for comparing the two."""

    decisions: list[dict] = field(default_factory=list)
    propagations: list[dict] = field(default_factory=list)
    states: list[dict] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    brokers: list[dict] = field(default_factory=list)
    ignored_fetches: Counter = field(default_factory=Counter)


def stream_into(store: Store, lines: list[bytes], cuts: tuple[int, ...] = CUTS, first_batch: int = 0) -> Streamed:
    """Feed `lines` to one engine and one propagation book and commit a batch per cut, as the sink does."""
    seen = Streamed()
    parsed: list[Event] = []
    for i, line in enumerate(lines, start=1):
        ev = parse_event(line, i, i)
        if isinstance(ev, DeadLetter):
            seen.dead_letters.append(ev)
        else:
            parsed.append(ev)
    engine = PartitionEngine(CONFIG)
    book = PropagationBook(CONFIG)
    incidents = IncidentBook(CONFIG)  # it tells which shrinks and expands committed (the counters')
    previous = None
    for batch_id, cut in enumerate(cuts, start=first_batch):
        engine.add([ev for ev in parsed if (previous is None or ev.ts >= previous) and ev.ts < cut])
        step = settle(book, [engine.advance(cut)], cut, incidents=incidents)
        step.records = [partition_record(p, CONFIG) for p in engine.partitions.values()]
        if previous is None:
            step.add_dead_letters(seen.dead_letters)
        store.write_batch(batch_id, step, blobs={"propagation_book": book.to_bytes()}, watermark_ms=cut)
        seen.decisions += msgspec.to_builtins(step.decisions)
        seen.propagations += msgspec.to_builtins(step.propagations)
        seen.ignored_fetches += Counter(by_reason(step.counters, "ignored_fetches"))
        seen.states = sorted(
            msgspec.to_builtins(step.records), key=lambda s: (s["cluster"], s["topic"], s["partition"])
        )
        seen.brokers = msgspec.to_builtins(step.brokers)
        previous = cut
    return seen


def follower_shrink_predicted(follower: dict, now_ms: int | None, window_ms: int | None) -> bool:
    """`isrwatch.state.records.shrink_predicted` on a follower's JSON form."""
    return shrink_predicted(follower["shrink_eligible_at_ms"], follower["last_caught_up_ms"], now_ms, window_ms)


def key(r: dict) -> tuple:
    return (r["cluster"], r["topic"], r["partition"])


def pages(client: TestClient, path: str, field: str, page_size: int, **params) -> list[dict]:
    """Follow next_page_token to the end; every page but the last is full."""
    items: list[dict] = []
    token = None
    while True:
        query = {**params, "page_size": page_size, **({"page_token": token} if token else {})}
        body = client.get(path, params=query).json()
        items += body[field]
        token = body["next_page_token"]
        if token is None:
            return items
        assert len(body[field]) == page_size


def state_record(fleet: Streamed, cluster: str, topic: str, partition: int) -> dict:
    return next(s for s in fleet.states if key(s) == (cluster, topic, partition))
