"""Incidents and the timeline in the store, written batch by batch as the sink writes them (SQLite and PostgreSQL):
each incident's row is its latest version, equal to the one pass's; the timeline keeps `timeline_retention_ms`."""

from __future__ import annotations

from isrwatch.state.config import Config
from isrwatch.state.replay import replay_events
from isrwatch.state.step import Settled
from isrwatch.store import open_store
from isrwatch.streaming.testing import run_stateful
from tests.support.incidents import CONFIG, story
from tests.support.state import lines_of, parse_all


def stream_batches(config: Config) -> list[Settled]:
    lines = lines_of(story())
    batches: list[Settled] = []
    cuts = list(range(0, len(lines), 150))
    run_stateful(lines, cuts, config, buckets=2, until=None, finish=False, each_batch=batches.append)
    return batches


def test_each_incident_row_is_its_latest_version_and_equals_the_one_pass(store_url: str) -> None:
    config = Config(**CONFIG)
    batches = stream_batches(config)
    want = {i.id: i.to_record() for i in replay_events(parse_all(story()), config).incidents}
    with open_store(store_url) as store:
        for batch_id, settled in enumerate(batches):
            store.write_batch(batch_id, settled, watermark_ms=settled.watermark, frontiers=settled.frontiers)
        listed = store.incidents(limit=10).items
        assert [i["kind"] for i in listed] == ["controller", "offline", "stuck"]
        for i in listed:
            if i["closed_ms"] is not None:  # the live stream settles the last one later than the replay's end
                assert store.incident(i["id"]) == want[i["id"]]
        assert store.incidents_open() == [("default", "controller", 1, 0)]
        timeline = store.timeline("default", 0, 200_000)
        assert [c["ts"] for c in timeline["counts"]] == [35_000, 46_000, 60_000, 80_000]


def test_the_timeline_and_closed_incidents_older_than_the_retention_are_dropped(store_url: str) -> None:
    config = Config(**CONFIG, timeline_retention_ms=30_000)
    with open_store(store_url) as store:
        for batch_id, settled in enumerate(stream_batches(config)):
            store.write_batch(batch_id, settled, watermark_ms=settled.watermark, frontiers=settled.frontiers)
        kept = store.timeline("default", 0, 200_000)
        frontier = store.event_time().of("default")
        assert frontier is not None and frontier - 30_000 > 60_000
        assert [c["ts"] for c in kept["counts"]] == [80_000]
        assert [i["kind"] for i in store.incidents().items] == ["controller", "offline"]
        assert all(m["ts"] >= frontier - 30_000 for m in kept["markers"])
