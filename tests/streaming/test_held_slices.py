"""Held events wait in slices of event time (SPEC §6, "State"): a call whose frontier moves less than the lateness
decompresses only the slice its frontier cuts; the slices before it are due whole, those after pass untouched."""

from __future__ import annotations

import json

import msgspec

from isrwatch.state.events import parse_event
from isrwatch.state.schedule import INF
from isrwatch.streaming.reports import BUCKET_STATE_VERSION, BucketState, Chunk, decode_bucket, encode
from isrwatch.streaming.stateful import split_due


def _fetches(start: int, end: int, step: int) -> list:
    return [
        parse_event(json.dumps({"type": "fetch", "ts": ts, "topic": "t", "partition": 0, "replica": 2,
                                "fetch_offset": 0, "leader_leo": 0}), seq=ts, arrival=ts)
        for ts in range(start, end, step)
    ]  # fmt: skip


def test_held_events_are_cut_into_slices_of_event_time() -> None:
    chunks = Chunk.slices("c", _fetches(0, 1_000, 10), 250)
    assert [(c.first, c.last) for c in chunks] == [(0, 240), (250, 490), (500, 740), (750, 990)]
    assert [ev.ts for c in chunks for ev in c.events()] == list(range(0, 1_000, 10))


def test_a_frontier_inside_the_held_events_decodes_only_the_slice_it_cuts() -> None:
    held = BucketState(BUCKET_STATE_VERSION, applied={"c": 0}, pending=Chunk.slices("c", _fetches(0, 1_000, 10), 250))
    held = decode_bucket(encode(held))  # as a call finds them
    fresh = _fetches(1_000, 1_100, 10)
    due, pending = split_due(held, "c", fresh, 600, 250)
    assert due is not None and sorted(ev.ts for ev in due) == list(range(0, 600, 10))
    kept = [c for c in pending if any(c is h for h in held.pending)]
    assert kept == held.pending[3:]  # the slice after the frontier passes as it came
    assert sorted(ev.ts for c in pending for ev in c.events()) == list(range(600, 1_100, 10))
    assert [(c.first, c.last) for c in pending if c not in kept] == [(600, 740), (1_000, 1_090)]


def test_a_chunk_kept_before_slices_is_cut_as_a_whole() -> None:
    """A chunk a version-6 state held has no known end: one reach inside it decodes it (nothing is lost)."""
    new = Chunk.of("c", _fetches(0, 1_000, 10))
    old = msgspec.msgpack.decode(msgspec.msgpack.encode(["c", new.first, new.size, new.data]), type=Chunk)
    assert old.last == INF
    held = BucketState(BUCKET_STATE_VERSION, applied={"c": 0}, pending=[old])
    due, pending = split_due(decode_bucket(encode(held)), "c", [], 2_000, 250)
    assert due is not None and len(due) == 100 and pending == []
