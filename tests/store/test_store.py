"""The store on SQLite and PostgreSQL: atomic idempotent batches, upserts, counters, and every reader filter.

Data comes from the real engine (the two-cluster fleet of tests/support/fleet.py streamed batch by
batch); each reader is compared with the same question asked of the engine's own records.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import msgspec
import pytest

from isrwatch.state.events import DeadLetter
from isrwatch.state.records import BrokerRecord, Decision, PartitionRecord
from isrwatch.state.step import Settled
from isrwatch.store import StoreError, open_store
from isrwatch.store.schema import SCHEMA_VERSION
from tests.support.fleet import END, S, Streamed, fleet_lines, follower_shrink_predicted, stream_into
from tests.support.kraft import PENDING_SINCE_MS, QUEUED, STUCK, UNTIL, kraft_replay

j = msgspec.to_builtins  # typed records as the JSON the engine's records are compared in


@pytest.fixture
def filled(store_url: str):
    with open_store(store_url) as store:
        yield store, stream_into(store, fleet_lines())


def _keys(records: list) -> list[tuple]:
    return [(r["cluster"], r["topic"], r["partition"]) for r in j(records)]


def _all_pages(read, page_size: int) -> list[dict]:
    items, after = [], None
    while True:
        page = read(after=after, limit=page_size)
        assert len(page.items) <= page_size
        items += j(page.items)
        if page.next_key is None:
            return items
        after = page.next_key


def test_write_batch_is_idempotent_per_batch_id(store_url: str) -> None:
    decision = msgspec.convert(
        {
            "ts": 5,
            "cluster": "c",
            "topic": "t",
            "partition": 0,
            "kind": "rejected",
            "leader": None,
            "leader_epoch": -1,
            "isr_before": [],
            "isr_after": [],
            "replicas_changed": [],
            "reasons": {},
            "error": "STALE_CONTROLLER_EPOCH",
            "hw": 0,
            "leader_leo": 0,
        },
        Decision,
    )
    with open_store(store_url) as store:
        assert store.last_batch_id() is None
        assert store.write_batch(3, Settled(decisions=[decision], counters=Counter(late_events=2)), watermark_ms=10)
        # Spark re-running batch 3, or an older batch arriving late: nothing changes.
        assert not store.write_batch(3, Settled(decisions=[decision], counters=Counter(late_events=2)), watermark_ms=10)
        assert not store.write_batch(1, Settled(decisions=[decision]), watermark_ms=99)
        assert store.last_batch_id() == 3
        assert len(store.decisions().items) == 1
        assert ("late_events", {}, 2.0) in store.tallies()
        assert store.stream_position().watermark_ms == 10
        # A batch without a watermark keeps the last one.
        assert store.write_batch(4)
        assert store.stream_position().batch_id == 4
        assert store.stream_position().watermark_ms == 10


def test_a_failing_batch_commits_nothing(store_url: str) -> None:
    with open_store(store_url) as store:
        store.write_batch(0, blobs={"book": b"v1"}, watermark_ms=1)
        broken = SimpleNamespace(ts=7, cluster="c")  # a decision without its fields fails half-way through
        with pytest.raises(AttributeError):
            store.write_batch(
                1, Settled(decisions=[broken], counters=Counter(late_events=1)), blobs={"book": b"v2"}, watermark_ms=8
            )
        assert store.last_batch_id() == 0
        assert store.load_blob("book") == b"v1"
        assert store.tallies() == []
        assert store.write_batch(1, blobs={"book": b"v2"}, watermark_ms=8)
        assert store.load_blob("book") == b"v2"
        assert store.load_blob("missing") is None


def test_counters_accumulate_across_batches(filled) -> None:
    store, seen = filled
    tallies = {(m, tuple(sorted(labels.items()))): v for m, labels, v in store.tallies()}
    shrinks = Counter(
        (d["cluster"], str(d["leader"]), reason)
        for d in seen.decisions
        if d["kind"] == "shrink"
        for reason in d["reasons"].values()
    )
    assert shrinks  # the fleet has shrinks, by stuck and slow followers
    for (cluster, broker, reason), n in shrinks.items():
        assert tallies[("isr_shrinks", (("broker", broker), ("cluster", cluster), ("reason", reason)))] == n
    for (cluster, kind), n in Counter((d["cluster"], d["kind"]) for d in seen.decisions).items():
        assert tallies[("decisions", (("cluster", cluster), ("kind", kind)))] == n
    for reason, n in seen.ignored_fetches.items():
        assert tallies[("ignored_fetches", (("reason", reason),))] == n
    for category, n in Counter(d.category for d in seen.dead_letters).items():
        assert tallies[("dead_letters", (("reason", category),))] == n
    assert tallies[("propagation_batch_size_count", (("cluster", "east"),))] == len(seen.propagations)


def test_partitions_are_upserted_with_their_replicas(filled) -> None:
    store, seen = filled
    assert _keys(_all_pages(store.partitions, 1000)) == _keys(seen.states)
    east = next(s for s in seen.states if _keys([s])[0] == ("east", "topic-0", 0))
    west = next(s for s in seen.states if _keys([s])[0] == ("west", "topic-0", 0))
    assert j(store.partition("topic-0", 0, "east")) == [east]
    assert j(store.partition("topic-0", 0)) == [east, west]  # no cluster named: every cluster's
    # Reassign east topic-0/0 to other brokers: the old replicas stop matching the broker filter.
    moved = {**east, "replicas": [7, 8], "isr": [7, 8], "leader": 7, "followers": []}
    assert store.write_batch(99, Settled(records=[msgspec.convert(moved, PartitionRecord)]))
    assert j(store.partition("topic-0", 0, "east")) == [moved]
    for broker in east["replicas"]:
        assert ("east", "topic-0", 0) not in _keys(store.partitions(broker=broker, limit=1000).items)
    assert _keys(store.partitions(broker=8, limit=1000).items) == [("east", "topic-0", 0)]
    assert store.partition_isr("topic-0", 0, "east") == [("east", 7, moved["leader_epoch"], [7, 8], None)]
    assert store.partition_isr("topic-0", 0) == [
        ("east", 7, moved["leader_epoch"], [7, 8], None),
        ("west", west["leader"], west["leader_epoch"], west["isr"], west.get("elr")),
    ]
    assert store.partition_isr("nope", 0) == [] and store.partition("topic-0", 0, "north") == []


@pytest.mark.parametrize("flag", ["under_replicated", "under_min_isr", "at_min_isr", "offline"])
def test_partition_state_filters_match_the_records(filled, flag: str) -> None:
    store, seen = filled
    expected = [s for s in seen.states if s[flag]]
    assert expected, f"the fleet has no {flag} partition"
    assert _keys(_all_pages(lambda **kw: store.partitions(state=flag, **kw), 2)) == _keys(expected)


def test_cluster_topic_and_broker_filters(filled) -> None:
    store, seen = filled
    for cluster, topic, broker in (
        ("east", None, None),
        (None, "topic-1", None),
        (None, None, 3),
        ("west", "topic-0", 1),
        ("east", None, 42),
    ):
        expected = [
            s
            for s in seen.states
            if (cluster is None or s["cluster"] == cluster)
            and (topic is None or s["topic"] == topic)
            and (broker is None or broker in s["replicas"])
        ]
        got = _all_pages(
            lambda cluster=cluster, topic=topic, broker=broker, **kw: store.partitions(
                cluster=cluster, topic=topic, broker=broker, **kw
            ),
            5,
        )
        assert _keys(got) == _keys(expected), (cluster, topic, broker)


@pytest.mark.parametrize("window_ms", [None, 0, 20_000])
def test_shrink_predicted_is_judged_at_the_watermark(filled, window_ms: int | None) -> None:
    store, seen = filled
    now = store.stream_position().watermark_ms
    assert now == END + 1
    expected = [s for s in seen.states if any(follower_shrink_predicted(f, now, window_ms) for f in s["followers"])]
    got = j(store.partitions(state="shrink_predicted", now=store.event_time(), window_ms=window_ms, limit=1000).items)
    assert _keys(got) == _keys(expected)
    followers = sum(follower_shrink_predicted(f, now, window_ms) for s in seen.states for f in s["followers"])
    assert sum(store.followers_predicted_to_shrink(store.event_time(), window_ms).values()) == followers
    # West's stuck and slow followers, not yet removed: one past its limit, one 758 ms before it, inside
    # the default window (half the 10 s lag) but not inside a zero window.
    assert {k[0] for k in _keys(got)} == {"west"}
    assert followers == {None: 2, 0: 1, 20_000: 2}[window_ms]


def test_decisions_newest_first_with_filters(filled) -> None:
    store, seen = filled
    newest_first = sorted(range(len(seen.decisions)), key=lambda i: -seen.decisions[i]["ts"])
    got = _all_pages(store.decisions, 7)
    assert [d["ts"] for d in got] == [seen.decisions[i]["ts"] for i in newest_first]
    assert sorted(map(str, got)) == sorted(map(str, seen.decisions))
    for kwargs, keep in (
        ({"kind": "shrink"}, lambda d: d["kind"] == "shrink"),
        ({"broker": 3}, lambda d: d["leader"] == 3 or 3 in d["replicas_changed"]),
        ({"since": S + 15_000}, lambda d: d["ts"] >= S + 15_000),
        (
            {"cluster": "east", "topic": "topic-2", "partition": 5},
            lambda d: (d["cluster"], d["topic"], d["partition"]) == ("east", "topic-2", 5),
        ),
    ):
        expected = [d for d in seen.decisions if keep(d)]
        assert expected, kwargs
        page = _all_pages(lambda kwargs=kwargs, **kw: store.decisions(**kwargs, **kw), 3)
        assert sorted(map(str, page)) == sorted(map(str, expected)), kwargs


def test_propagations_with_filters(filled) -> None:
    store, seen = filled
    assert len(seen.propagations) >= 2
    assert sorted(map(str, j(store.propagations(limit=100).items))) == sorted(map(str, seen.propagations))
    one = seen.propagations[0]
    topic = one["partitions"][0]["topic"]
    for kwargs, keep in (
        ({"broker": one["broker"]}, lambda p: p["broker"] == one["broker"]),
        ({"topic": topic}, lambda p: any(tp["topic"] == topic for tp in p["partitions"])),
        ({"trigger": "max_delay"}, lambda p: p["trigger"] == "max_delay"),
        ({"since": one["ts"] + 1}, lambda p: p["ts"] > one["ts"]),
    ):
        expected = [p for p in seen.propagations if keep(p)]
        assert sorted(map(str, j(store.propagations(**kwargs, limit=100).items))) == sorted(map(str, expected)), kwargs


def test_brokers_keep_the_pending_set_and_replica_counts(filled) -> None:
    store, seen = filled
    views = {(b["cluster"], b["broker"]): b for b in store.brokers()}
    pending = [b for b in seen.brokers if b["pending"]]
    assert pending  # the re-elected partition's expands wait for their batch
    for b in seen.brokers:
        view = views[(b["cluster"], b["broker"])]
        assert view["pending"] == b["pending"]
        sent = [p["ts"] for p in seen.propagations if (p["cluster"], p["broker"]) == (b["cluster"], b["broker"])]
        assert view["last_propagation_ms"] == max(sent, default=None)  # its last batch, not its throttle's clock
    for (cluster, broker), view in views.items():
        hosted = [s for s in seen.states if s["cluster"] == cluster and broker in s["replicas"]]
        assert view["replicas"] == len(hosted)
        assert view["partitions_led"] == sum(s["leader"] == broker for s in hosted)
        out = [s for s in hosted if broker not in s["isr"]]
        assert view["out_of_sync_replicas"] == len(out)
        assert [(r["topic"], r["partition"]) for r in store.out_of_sync_replicas(cluster, broker)] == [
            (s["topic"], s["partition"]) for s in out
        ]
    assert [b["cluster"] for b in store.brokers(broker=1)] == ["east", "west"]


def test_dead_letters_are_kept(filled) -> None:
    store, seen = filled
    got = _all_pages(store.dead_letters, 1)
    assert [d["raw"] for d in got] == [d.raw for d in reversed(seen.dead_letters)]
    assert {d["reason"] for d in got} == {d.reason for d in seen.dead_letters}


def test_dead_letters_keep_any_input(store_url: str) -> None:
    """Garbage input (NUL bytes, broken UTF-8) is stored and served as received, on both databases."""
    raws = ["\x00\ufffd garbage", '{"type": "tick", "ts": 1}\x00', "plain"]
    with open_store(store_url) as store:
        store.write_batch(
            0, Settled(dead_letters=[DeadLetter(raw=raw, reason="invalid JSON", field=None) for raw in raws])
        )
        assert [d["raw"] for d in store.dead_letters().items] == raws[::-1]


def test_progress_rows_count_input_once(store_url: str) -> None:
    with open_store(store_url) as store:
        row = {
            "batch_id": 5,
            "wall_ms": 1000,
            "watermark_ms": 900,
            "input_rows": 40,
            "input_rows_per_second": 4.0,
            "processed_rows_per_second": 8.0,
            "batch_duration_ms": 1200,
            "state_rows": 16,
            "late_rows": 1,
        }
        store.record_progress(row)
        store.record_progress({**row, "batch_duration_ms": 1300})  # the listener reporting the same batch again
        store.record_progress({**row, "batch_id": 6, "input_rows": 2})
        assert store.latest_progress()["batch_id"] == 6
        assert ("stream_input_rows", {}, 42.0) in store.tallies()


def test_followers_for_metrics(filled) -> None:
    store, seen = filled
    behind = sorted(
        (f["last_caught_up_ms"], s["cluster"], s["topic"], s["partition"], f["replica"])
        for s in seen.states
        for f in s["followers"]
        if f["shrink_eligible_at_ms"] is not None
    )
    got = store.followers(order="caught_up", limit=3)
    assert [(r[4], *r[:4]) for r in got] == behind[:3]
    lags = sorted(
        (-f["lag_offsets"], s["cluster"], s["topic"], s["partition"], f["replica"])
        for s in seen.states
        for f in s["followers"]
        if (f["lag_offsets"] or 0) > 0
    )
    assert [(-r[5], *r[:4]) for r in store.followers(order="lag", limit=4)] == lags[:4]
    listed = store.followers(order="topic", topics=["topic-2"])
    assert {r[1] for r in listed} == {"topic-2"}
    assert len(listed) == sum(len(s["followers"]) for s in seen.states if s["topic"] == "topic-2")
    assert store.followers(order="topic", topics=[]) == []


def test_urls_and_sqlite_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for url, path in (
        ("sqlite:///rel.db", tmp_path / "rel.db"),
        (f"sqlite:///{tmp_path}/abs.db", tmp_path / "abs.db"),
        (str(tmp_path / "bare.db"), tmp_path / "bare.db"),
    ):
        with open_store(url) as store:
            store.write_batch(0)
        assert path.is_file(), url
        assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    for bad in ("mysql://x/y", "sqlite:relative.db"):
        with pytest.raises(StoreError):
            open_store(bad)


def test_schema_from_another_version_is_refused(store_url: str) -> None:
    with open_store(store_url) as store, store._transaction() as cur:
        cur.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'")
    with pytest.raises(StoreError, match="schema version 999"):
        open_store(store_url)


def test_a_store_of_the_previous_schema_is_refused_before_any_ddl_touches_it(store_url: str) -> None:
    """Schema 3 had no divergences.cause; its store is refused by version, not by the new index's SQL error."""
    with open_store(store_url) as store, store._transaction() as cur:
        cur.execute("DROP TABLE divergences")
        cur.execute(
            "CREATE TABLE divergences (batch_id BIGINT NOT NULL, seq INTEGER NOT NULL, ts BIGINT NOT NULL, "
            "cluster TEXT NOT NULL, broker INTEGER NOT NULL, kind TEXT NOT NULL, subject TEXT NOT NULL, topic TEXT, "
            "partition INTEGER, record TEXT NOT NULL, PRIMARY KEY (batch_id, seq))"
        )
        cur.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    with pytest.raises(StoreError, match=f"schema version 3, this isrwatch writes {SCHEMA_VERSION}"):
        open_store(store_url)


def test_a_store_of_schema_5_is_migrated_keeping_its_data(store_url: str) -> None:
    """Schema 5 had no brokers.clock_offset_ms: opening it adds the column and keeps every row; the brokers' offsets
    are written and read from then on."""
    with open_store(store_url) as store:
        seen = stream_into(store, fleet_lines())
        before = (store.brokers(), j(store.decisions(limit=1000).items), store.last_batch_id())
        with store._transaction() as cur:
            cur.execute("ALTER TABLE brokers DROP COLUMN clock_offset_ms")
            cur.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
    assert seen.brokers and before[1]
    with open_store(store_url) as store:
        assert store._one("SELECT value FROM meta WHERE key = 'schema_version'") == (str(SCHEMA_VERSION),)
        assert (store.brokers(), j(store.decisions(limit=1000).items), store.last_batch_id()) == before
        first = seen.brokers[0]
        record = msgspec.convert({**first, "clock_offset_ms": -600_000}, BrokerRecord)
        store.write_batch(before[2] + 1, Settled(brokers=[record]))
        [read] = store.brokers(cluster=first["cluster"], broker=first["broker"])
        assert read["clock_offset_ms"] == -600_000


def test_unreachable_postgres_is_a_store_error() -> None:
    with pytest.raises(StoreError, match="cannot connect") as failure:
        open_store("postgresql://nobody:secret@127.0.0.1:1/none?connect_timeout=2")
    assert "secret" not in str(failure.value)


def test_the_api_reads_while_the_job_writes(tmp_path: Path) -> None:
    """WAL: a reader is never blocked by an open write transaction and sees the last committed batch."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    with open_store(url) as writer, open_store(url) as reader:
        seen: Streamed = stream_into(writer, fleet_lines()[:400], cuts=(S + 1000,))
        with writer._transaction() as cur:
            cur.execute("DELETE FROM partitions")
            assert len(reader.partitions(limit=1000).items) == len(seen.states)
        assert reader.partitions(limit=1000).items == []


@pytest.fixture
def kraft(store_url: str):
    """The KRaft cluster of tests/support/kraft.py replayed into the store as one batch (`isrwatch replay --store`)."""
    result = kraft_replay()
    with open_store(store_url) as store:
        store.write_batch(0, result, watermark_ms=UNTIL + 1)
        yield store, result


def test_alter_partition_requests_newest_answer_first_with_filters(kraft) -> None:
    store, result = kraft
    requests = j(result.alter_partitions)
    assert [r["sent_ms"] for r in requests] == [3000, 5000, 6000]  # broker 1's request in flight is no output yet
    assert _all_pages(store.alter_partitions, 1) == requests[::-1]
    assert j(store.alter_partitions(broker=1).items) == []
    assert j(store.alter_partitions(topic="ledger", partition=3).items) == requests[:0:-1]
    assert j(store.alter_partitions(partition=2, cluster="kraft").items) == requests[:1]
    assert j(store.alter_partitions(since=5010).items) == requests[:0:-1]
    assert j(store.alter_partitions(cluster="east").items) == []


def test_isr_pending_lists_the_partitions_whose_change_is_not_committed(kraft) -> None:
    store, result = kraft
    pending = j(store.partitions(state="isr_pending").items)
    assert _keys(pending) == [("kraft", *STUCK), ("kraft", *QUEUED)]
    assert [(p["isr_state"], p["pending_since_ms"], p["isr"]) for p in pending] == [
        ("pending_shrink", PENDING_SINCE_MS, [1, 2, 3])
    ] * 2
    assert j(store.partitions().items) == sorted(j(result.records), key=lambda r: (r["topic"], r["partition"]))
    assert store.pending_by_leader() == [("kraft", 1, 2, PENDING_SINCE_MS)]


def test_brokers_keep_their_alter_partition_queue_and_request_in_flight(kraft) -> None:
    store, result = kraft
    views = {b["broker"]: b for b in store.broker_propagation()}
    records = {b.broker: j(b) for b in result.brokers}
    assert views[1]["queue"] == records[1]["queue"] and [i["partition"] for i in views[1]["queue"]] == [QUEUED[1]]
    assert views[1]["in_flight"] == records[1]["in_flight"] and views[1]["in_flight"]["sent_ms"] == PENDING_SINCE_MS
    assert (views[2]["queue"], views[2]["in_flight"]) == ([], None)
    assert store.alter_partition_managers() == [("kraft", 1, 1, PENDING_SINCE_MS), ("kraft", 2, 0, None)]


def test_alter_partition_answers_are_tallied_by_outcome_with_their_latency(kraft) -> None:
    store, _ = kraft
    tallies = {(m, tuple(sorted(labels.items()))): v for m, labels, v in store.tallies()}
    outcome = {
        labels[2][1]: v
        for (m, labels), v in tallies.items()
        if m == "alter_partition_requests" and labels[:2] == (("broker", "2"), ("cluster", "kraft"))
    }
    assert outcome == {"committed": 2, "INELIGIBLE_REPLICA": 1}
    assert tallies[("failed_isr_updates", (("reason", "INELIGIBLE_REPLICA"),))] == 1
    assert tallies[("alter_partition_latency_count", (("cluster", "kraft"),))] == 3
    assert tallies[("alter_partition_latency_sum", (("cluster", "kraft"),))] == pytest.approx(0.04)
    assert tallies[("alter_partition_latency_bucket", (("cluster", "kraft"), ("le", "0.01")))] == 2  # 10 ms twice
    assert tallies[("alter_partition_latency_bucket", (("cluster", "kraft"), ("le", "0.025")))] == 1


def test_zookeeper_brokers_and_partitions_show_no_alter_partition_state(filled) -> None:
    store, seen = filled
    assert all("queue" not in b and "in_flight" not in b for b in store.brokers())
    assert store.partitions(state="isr_pending").items == [] and store.pending_by_leader() == []
    assert store.alter_partition_managers() == [] and store.alter_partitions().items == []


def _record(partition: int, replicas: list[int], hw: int) -> PartitionRecord:
    follower = {
        "leo": hw,
        "log_start_offset": 0,
        "last_caught_up_ms": 5,
        "last_fetch_leader_leo": hw,
        "last_fetch_ms": 5,
        "in_sync": True,
        "lag_offsets": 0,
        "shrink_eligible_at_ms": None,
        "predicted_shrink_at_ms": None,
    }
    return msgspec.convert(
        {
            "cluster": "c",
            "topic": "t",
            "partition": partition,
            "leader": replicas[0],
            "leader_epoch": 1,
            "controller_epoch": 1,
            "partition_epoch": 0,
            "replicas": replicas,
            "isr": sorted(replicas),
            "hw": hw,
            "leader_leo": hw,
            "leader_epoch_start_offset": 0,
            "offline": False,
            "under_replicated": False,
            "under_min_isr": False,
            "at_min_isr": False,
            "followers": [{"replica": r, **follower} for r in sorted(replicas[1:])],
        },
        PartitionRecord,
    )


def test_executors_partition_rows_are_idempotent_per_batch_and_key(store_url: str) -> None:
    """Each state key's rows come in a transaction of their own before the driver commits the batch (SPEC §6): a
    re-run batch writes the same rows once, another key's rows of the batch keep theirs, a shrunk replica set loses
    its old replica rows, and nothing is written for a batch already committed."""
    with open_store(store_url) as store:
        store.write_batch(6, watermark_ms=1)
        assert store.write_partitions(7, [(_record(0, [1, 2, 3], hw=10), 100)])
        assert store.write_partitions(7, [(_record(0, [1, 2, 3], hw=10), 100)])  # the batch run again
        assert store.write_partitions(7, [(_record(1, [2, 3, 1], hw=20), 100)])  # another key, same batch
        replicas = store._rows("SELECT topic, partition, broker FROM replicas ORDER BY partition, broker")
        assert replicas == [("t", 0, 1), ("t", 0, 2), ("t", 0, 3), ("t", 1, 1), ("t", 1, 2), ("t", 1, 3)]
        store.write_batch(7, watermark_ms=2)
        assert not store.write_partitions(7, [(_record(0, [1, 2], hw=99), 200)])  # committed: no change
        assert [r.hw for r in store.partition("t", 0)] == [10]
        assert store.write_partitions(8, [(_record(0, [1, 2], hw=30), 300)])
        assert store._rows("SELECT broker FROM replicas WHERE partition = 0 ORDER BY broker") == [(1,), (2,)]
        assert store.partition_as_of()[("c", "t", 0)] == 300
        assert [r.hw for r in store.partition("t", 1)] == [20]
