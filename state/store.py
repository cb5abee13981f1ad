"""The SQL store: schema, writer and reader shared by the streaming sink, `isrwatch replay --store` and the API.

One module, two databases: SQLite (stdlib, WAL so the API reads while the job writes) and
PostgreSQL (psycopg 3). The SQL is written once with `?` placeholders; the dialect layer only
swaps placeholders, the blob type, the DDL lock and how bulk rows get in (COPY on PostgreSQL).
Records are kept as JSON text exactly as the engine produced them (SPEC §5), next to indexed
columns for the filters the API offers. Event-time "now" for readers is the settled watermark of
the last batch; the only wall-clock value kept is when a batch committed, which says how fresh
the stream is.
"""

from __future__ import annotations

import bisect
import json
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

import msgspec

SCHEMA_VERSION = 1
PROPAGATION_BATCH_SIZE_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
PROPAGATION_DELAY_BUCKETS = (1, 2.5, 5, 6, 7.5, 10, 15, 30, 60, 62.5, 70, 90, 120)
PARTITION_STATES = ("under_replicated", "under_min_isr", "at_min_isr", "offline", "shrink_predicted")
# Fixed SQL per flag: a literal (not a parameter) so both planners can use the partial indexes.
_FLAG_FILTERS = {flag: f"p.{flag} = 1" for flag in PARTITION_STATES[:4]}
_EMPTY: Mapping[Any, Any] = MappingProxyType({})

_encode = msgspec.json.encode
_decode = msgspec.json.decode

Key = tuple[Any, ...]


class StoreError(RuntimeError):
    """The store cannot be opened or used (bad URL, unreachable server, schema from another version)."""


@dataclass(frozen=True)
class Page:
    """One page of a keyset-paginated read; `next_key` is the last row's key when more rows follow."""

    items: list[dict]
    next_key: Key | None


@dataclass(frozen=True)
class StreamPosition:
    """What the last committed batch says about the stream: its id, wall-clock commit time, watermark."""

    batch_id: int
    committed_wall_ms: int
    watermark_ms: int | None


def shrink_warning_at(eligible_ms: int, last_caught_up_ms: int, window_ms: int | None = None) -> int:
    """When an ISR follower starts counting as near its lag limit: `window_ms` before it becomes eligible.

    The default window is half the lag, which the record carries implicitly (SPEC §5: eligible =
    last caught-up + lag + 1), so readers need no copy of the job's configuration.
    """
    if window_ms is None:
        window_ms = (eligible_ms - last_caught_up_ms - 1) // 2
    return eligible_ms - window_ms


def follower_shrink_predicted(follower: Mapping[str, Any], now_ms: int | None, window_ms: int | None) -> bool:
    """An ISR follower past its lag limit, or within `window_ms` of it, as of event time `now_ms`."""
    eligible = follower.get("shrink_eligible_at_ms")
    if eligible is None or now_ms is None:
        return False
    return shrink_warning_at(eligible, follower["last_caught_up_ms"], window_ms) <= now_ms


# ---------------------------------------------------------------------------------------------- schema

_DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS batches (
    batch_id BIGINT PRIMARY KEY, committed_wall_ms BIGINT NOT NULL, watermark_ms BIGINT,
    decisions INTEGER NOT NULL, propagations INTEGER NOT NULL, partitions INTEGER NOT NULL,
    dead_letters INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS partitions (
    cluster TEXT NOT NULL, topic TEXT NOT NULL, partition INTEGER NOT NULL, leader INTEGER,
    leader_epoch BIGINT NOT NULL, isr TEXT NOT NULL, under_replicated SMALLINT NOT NULL,
    under_min_isr SMALLINT NOT NULL, at_min_isr SMALLINT NOT NULL, offline SMALLINT NOT NULL,
    record TEXT NOT NULL, batch_id BIGINT NOT NULL, PRIMARY KEY (cluster, topic, partition));
CREATE INDEX IF NOT EXISTS partitions_under_replicated ON partitions (cluster, topic, partition)
    WHERE under_replicated = 1;
CREATE INDEX IF NOT EXISTS partitions_under_min_isr ON partitions (cluster, topic, partition)
    WHERE under_min_isr = 1;
CREATE INDEX IF NOT EXISTS partitions_at_min_isr ON partitions (cluster, topic, partition) WHERE at_min_isr = 1;
CREATE INDEX IF NOT EXISTS partitions_offline ON partitions (cluster, topic, partition) WHERE offline = 1;
CREATE INDEX IF NOT EXISTS partitions_topic ON partitions (topic, cluster, partition);
CREATE INDEX IF NOT EXISTS partitions_batch ON partitions (batch_id);
CREATE INDEX IF NOT EXISTS partitions_flags
    ON partitions (cluster, under_replicated, under_min_isr, at_min_isr, offline);
CREATE TABLE IF NOT EXISTS replicas (
    cluster TEXT NOT NULL, topic TEXT NOT NULL, partition INTEGER NOT NULL, broker INTEGER NOT NULL,
    is_leader SMALLINT NOT NULL, in_sync SMALLINT NOT NULL, leo BIGINT, lag_offsets BIGINT,
    last_caught_up_ms BIGINT, shrink_eligible_at_ms BIGINT, shrink_warning_at_ms BIGINT,
    PRIMARY KEY (cluster, topic, partition, broker));
CREATE INDEX IF NOT EXISTS replicas_by_broker ON replicas (broker, cluster, is_leader, in_sync);
CREATE INDEX IF NOT EXISTS replicas_out_of_sync ON replicas (cluster, broker, topic, partition) WHERE in_sync = 0;
CREATE INDEX IF NOT EXISTS replicas_shrink_eligible ON replicas (shrink_eligible_at_ms, cluster)
    WHERE shrink_eligible_at_ms IS NOT NULL;
CREATE INDEX IF NOT EXISTS replicas_shrink_warning ON replicas (shrink_warning_at_ms, cluster)
    WHERE shrink_warning_at_ms IS NOT NULL;
CREATE INDEX IF NOT EXISTS replicas_caught_up ON replicas (last_caught_up_ms)
    WHERE shrink_eligible_at_ms IS NOT NULL;
CREATE INDEX IF NOT EXISTS replicas_lag ON replicas (lag_offsets) WHERE lag_offsets > 0;
CREATE TABLE IF NOT EXISTS decisions (
    batch_id BIGINT NOT NULL, seq INTEGER NOT NULL, ts BIGINT NOT NULL, cluster TEXT NOT NULL,
    topic TEXT NOT NULL, partition INTEGER NOT NULL, kind TEXT NOT NULL, record TEXT NOT NULL,
    PRIMARY KEY (batch_id, seq));
CREATE INDEX IF NOT EXISTS decisions_time ON decisions (ts, batch_id, seq);
CREATE INDEX IF NOT EXISTS decisions_partition ON decisions (cluster, topic, partition, ts, batch_id, seq);
CREATE INDEX IF NOT EXISTS decisions_kind ON decisions (kind, ts, batch_id, seq);
CREATE TABLE IF NOT EXISTS decision_brokers (
    batch_id BIGINT NOT NULL, seq INTEGER NOT NULL, broker INTEGER NOT NULL,
    PRIMARY KEY (batch_id, seq, broker));
CREATE TABLE IF NOT EXISTS propagations (
    batch_id BIGINT NOT NULL, seq INTEGER NOT NULL, ts BIGINT NOT NULL, cluster TEXT NOT NULL,
    broker INTEGER NOT NULL, trigger TEXT NOT NULL, record TEXT NOT NULL, PRIMARY KEY (batch_id, seq));
CREATE INDEX IF NOT EXISTS propagations_time ON propagations (ts, batch_id, seq);
CREATE INDEX IF NOT EXISTS propagations_broker ON propagations (broker, cluster, ts, batch_id, seq);
CREATE TABLE IF NOT EXISTS propagation_partitions (
    batch_id BIGINT NOT NULL, seq INTEGER NOT NULL, topic TEXT NOT NULL, partition INTEGER NOT NULL,
    PRIMARY KEY (batch_id, seq, topic, partition));
CREATE TABLE IF NOT EXISTS dead_letters (
    batch_id BIGINT NOT NULL, seq INTEGER NOT NULL, ts BIGINT, reason TEXT NOT NULL, field TEXT,
    raw {blob} NOT NULL, PRIMARY KEY (batch_id, seq));
CREATE TABLE IF NOT EXISTS brokers (
    cluster TEXT NOT NULL, broker INTEGER NOT NULL, pending TEXT NOT NULL, pending_count INTEGER NOT NULL,
    first_change_ts BIGINT, last_isr_change_ms BIGINT NOT NULL, last_propagation_ms BIGINT NOT NULL,
    PRIMARY KEY (cluster, broker));
CREATE TABLE IF NOT EXISTS tallies (
    metric TEXT NOT NULL, labels TEXT NOT NULL, value DOUBLE PRECISION NOT NULL, PRIMARY KEY (metric, labels));
CREATE TABLE IF NOT EXISTS blobs (name TEXT PRIMARY KEY, value {blob} NOT NULL);
CREATE TABLE IF NOT EXISTS progress (
    batch_id BIGINT PRIMARY KEY, wall_ms BIGINT, watermark_ms BIGINT, input_rows BIGINT,
    input_rows_per_second DOUBLE PRECISION, processed_rows_per_second DOUBLE PRECISION,
    batch_duration_ms BIGINT, state_rows BIGINT, late_rows BIGINT);
"""

_PARTITION_COLUMNS = ("cluster", "topic", "partition", "leader", "leader_epoch", "isr", "under_replicated",
                      "under_min_isr", "at_min_isr", "offline", "record", "batch_id")
_REPLICA_COLUMNS = ("cluster", "topic", "partition", "broker", "is_leader", "in_sync", "leo", "lag_offsets",
                    "last_caught_up_ms", "shrink_eligible_at_ms", "shrink_warning_at_ms")
PROGRESS_FIELDS = ("batch_id", "wall_ms", "watermark_ms", "input_rows", "input_rows_per_second",
                   "processed_rows_per_second", "batch_duration_ms", "state_rows", "late_rows")


# ---------------------------------------------------------------------------------------------- tallies

def _labels(**labels: Any) -> str:
    return json.dumps({k: str(v) for k, v in labels.items()}, sort_keys=True, separators=(",", ":"))


def _bucket(value: float, bounds: Sequence[float]) -> str:
    i = bisect.bisect_left(bounds, value)
    return f"{bounds[i]:g}" if i < len(bounds) else "+Inf"


def batch_tallies(decisions: Iterable[Mapping], propagations: Iterable[Mapping],
                  counters: Mapping[str, int]) -> dict[tuple[str, str], float]:
    """The cumulative-counter increments one batch contributes, keyed by (metric, labels JSON).

    Counted once at write time, so /metrics never scans the decision history: shrinks per removed
    follower by its reason, expands, decisions by kind, batches by trigger, the batch-size and
    change-to-batch delay histograms, plus the caller's `name[.reason]` counters.
    """
    counts: Counter[tuple] = Counter()  # (metric, (label, value), ...) -> increment
    for d in decisions:
        cluster, kind, leader = ("cluster", d["cluster"]), d["kind"], ("broker", d["leader"])
        counts[("decisions", cluster, ("kind", kind))] += 1
        if kind == "shrink":
            for reason in d["reasons"].values():
                counts[("isr_shrinks", leader, cluster, ("reason", reason))] += 1
        elif kind == "expand":
            counts[("isr_expands", leader, cluster)] += 1
    for p in propagations:
        cluster = ("cluster", p["cluster"])
        counts[("propagation_batches", ("broker", p["broker"]), cluster, ("trigger", p["trigger"]))] += 1
        size = len(p["partitions"])
        counts[("propagation_batch_size_bucket", cluster, ("le", _bucket(size, PROPAGATION_BATCH_SIZE_BUCKETS)))] += 1
        counts[("propagation_batch_size_sum", cluster)] += size
        counts[("propagation_batch_size_count", cluster)] += 1
        if p.get("first_change_ts") is not None:
            delay = (p["ts"] - p["first_change_ts"]) / 1000
            counts[("propagation_delay_bucket", cluster, ("le", _bucket(delay, PROPAGATION_DELAY_BUCKETS)))] += 1
            counts[("propagation_delay_sum", cluster)] += delay
            counts[("propagation_delay_count", cluster)] += 1
    for name, value in counters.items():
        metric, _, reason = name.partition(".")
        counts[(metric, ("reason", reason)) if reason else (metric,)] += value
    return {(key[0], _labels(**dict(key[1:]))): value for key, value in counts.items()}


# ---------------------------------------------------------------------------------------------- rows

def _partition_rows(record: Mapping, batch_id: int) -> tuple[tuple, list[tuple]]:
    """The partitions row and the replicas rows (one per assigned replica) of a SPEC §5 state record."""
    key = (record["cluster"], record["topic"], record["partition"])
    isr = set(record["isr"])
    leader = record["leader"]
    row = (*key, leader, record["leader_epoch"], _encode(record["isr"]).decode(),
           int(record["under_replicated"]), int(record["under_min_isr"]), int(record["at_min_isr"]),
           int(record["offline"]), _encode(record).decode(), batch_id)
    followers = {f["replica"]: f for f in record["followers"]}
    replicas = []
    for broker in record["replicas"]:
        f = followers.get(broker)
        if f is None:  # the leader (or a replica of a partition without an accepted leader)
            replicas.append((*key, broker, int(broker == leader), int(broker in isr), None, None, None, None, None))
            continue
        eligible = f["shrink_eligible_at_ms"]
        warning = None if eligible is None else shrink_warning_at(eligible, f["last_caught_up_ms"])
        replicas.append((*key, broker, 0, int(f["in_sync"]), f["leo"], f["lag_offsets"], f["last_caught_up_ms"],
                         eligible, warning))
    return row, replicas


# ---------------------------------------------------------------------------------------------- dialects

class _Dialect:
    """What differs between the databases, and nothing else: SQLite's way here, PostgreSQL's in the subclass."""

    name = "sqlite"
    blob = "BLOB"

    def sql(self, text: str) -> str:
        return text

    def ddl_lock(self, cur: Any) -> None:
        """Serialise schema creation between processes (SQLite: BEGIN IMMEDIATE already does)."""

    def insert(self, cur: Any, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]],
               conflict: str) -> None:
        """Bulk insert: sqlite3's executemany loops in C."""
        cur.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
                        + conflict, rows)


class _Postgres(_Dialect):
    name = "postgresql"
    blob = "BYTEA"

    def sql(self, text: str) -> str:
        return text.replace("?", "%s")

    def ddl_lock(self, cur: Any) -> None:
        cur.execute("SELECT pg_advisory_xact_lock(7150001)")

    def insert(self, cur: Any, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]],
               conflict: str) -> None:
        """Bulk insert with COPY (psycopg's executemany pays Python overhead per row and per parameter);
        an upsert goes through a temporary staging table, since COPY cannot resolve conflicts."""
        names = ", ".join(columns)
        target = table
        if conflict:
            target = f"isrwatch_stage_{table}"
            cur.execute(f"CREATE TEMP TABLE IF NOT EXISTS {target} (LIKE {table}) ON COMMIT DELETE ROWS")
            cur.execute(f"TRUNCATE {target}")
        with cur.copy(f"COPY {target} ({names}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        if conflict:
            cur.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM {target}{conflict}")


def _sqlite_path(url: str) -> str:
    if url.startswith("sqlite:///"):
        rest = url[len("sqlite:///"):]
        return rest if rest.startswith("/") else str(Path(rest).resolve())
    if url.startswith("sqlite:"):
        raise StoreError(f"store URL {url!r}: use sqlite:///relative/path.db or sqlite:////absolute/path.db")
    return url


# ---------------------------------------------------------------------------------------------- the store

class Store:
    """Writes the job's batches atomically and idempotently; serves the reads of the API and /metrics.

    Connections are per thread (the API answers from a thread pool; the sink writes from one thread).
    """

    def __init__(self, url: str) -> None:
        self.url = url
        scheme = urlsplit(url).scheme
        if scheme in ("postgresql", "postgres"):
            self.dialect: _Dialect = _Postgres()
        elif scheme in ("", "sqlite") or len(scheme) == 1:  # a bare path (a Windows drive letter is a path too)
            self.dialect = _Dialect()
            self._path = _sqlite_path(url)
        else:
            raise StoreError(f"store URL {url!r}: expected sqlite:///PATH, a file path or postgresql://...")
        self._local = threading.local()
        self._connections: list[Any] = []
        self._lock = threading.Lock()
        self._sql_cache: dict[str, str] = {}
        self._create_schema()

    # -- connections

    def _connect(self) -> Any:
        if self.dialect.name == "postgresql":
            import psycopg

            try:
                return psycopg.connect(self.url, autocommit=True)
            except psycopg.OperationalError as exc:
                raise StoreError(f"cannot connect to {_redacted(self.url)}: {exc}") from None
        try:
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False, timeout=30)
        except sqlite3.OperationalError as exc:
            raise StoreError(f"cannot open SQLite store {self._path}: {exc}") from None
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    def _conn(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None or (self.dialect.name == "postgresql" and conn.closed):  # new thread, or server lost
            fresh = self._connect()
            with self._lock:
                if conn is not None:
                    self._connections.remove(conn)
                self._connections.append(fresh)
            conn = self._local.conn = fresh
        return conn

    def close(self) -> None:
        """Close every thread's connection (the store can be used again; it reconnects on demand)."""
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _q(self, text: str) -> str:
        sql = self._sql_cache.get(text)
        if sql is None:
            sql = self._sql_cache[text] = self.dialect.sql(text)
        return sql

    def _rows(self, text: str, params: Sequence[Any] = ()) -> list[tuple]:
        cur = self._conn().cursor()
        try:
            cur.execute(self._q(text), params)
            return cur.fetchall()
        finally:
            cur.close()

    def _one(self, text: str, params: Sequence[Any] = ()) -> tuple | None:
        rows = self._rows(text, params)
        return rows[0] if rows else None

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        """One write transaction; SQLite takes the write lock up front so readers never block it midway."""
        conn = self._conn()
        if self.dialect.name == "postgresql":
            with conn.transaction(), conn.cursor() as cur:
                yield cur
            return
        cur = conn.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            yield cur
        except BaseException:
            conn.rollback()
            raise
        else:
            conn.commit()
        finally:
            cur.close()

    def _create_schema(self) -> None:
        with self._transaction() as cur:
            self.dialect.ddl_lock(cur)
            for statement in _DDL.format(blob=self.dialect.blob).split(";"):
                if statement.strip():
                    cur.execute(statement)
            cur.execute(self._q("SELECT value FROM meta WHERE key = 'schema_version'"))
            row = cur.fetchone()
            if row is None:
                cur.execute(self._q("INSERT INTO meta (key, value) VALUES ('schema_version', ?)"),
                            (str(SCHEMA_VERSION),))
            elif row[0] != str(SCHEMA_VERSION):
                raise StoreError(f"store {_redacted(self.url)} has schema version {row[0]}, "
                                 f"this isrwatch writes {SCHEMA_VERSION}")

    # -- writes

    def write_batch(self, batch_id: int, *, decisions: Iterable[Mapping] = (), propagations: Iterable[Mapping] = (),
                    partitions: Iterable[Mapping] = (), dead_letters: Iterable[Mapping] = (),
                    brokers: Iterable[Mapping] = (), counters: Mapping[str, int] = _EMPTY,
                    blobs: Mapping[str, bytes] = _EMPTY, watermark_ms: int | None = None) -> bool:
        """Commit one micro-batch of outputs in one transaction; False (and no change) for a replayed id.

        Spark re-runs a failed batch with the same id and data, so a `batch_id` at or below the last
        committed one is skipped. A batch without a watermark keeps the previous one.
        """
        decisions = list(decisions)
        propagations = list(propagations)
        # One row per partition (the last record wins): a multi-row upsert may not touch a row twice.
        partitions = list({(r["cluster"], r["topic"], r["partition"]): r for r in partitions}.values())
        dead_letters = list(dead_letters)
        insert = self._insert
        with self._transaction() as cur:
            cur.execute(self._q("SELECT batch_id, watermark_ms FROM batches ORDER BY batch_id DESC LIMIT 1"))
            last = cur.fetchone()
            if last is not None and batch_id <= last[0]:
                return False
            if watermark_ms is None and last is not None:
                watermark_ms = last[1]
            rows, replicas = [], []
            for record in partitions:
                row, reps = _partition_rows(record, batch_id)
                rows.append(row)
                replicas.extend(reps)
            insert(cur, "partitions", _PARTITION_COLUMNS, rows, upsert_on=3)
            cur.execute(self._q("DELETE FROM replicas WHERE (cluster, topic, partition) IN"
                                " (SELECT cluster, topic, partition FROM partitions WHERE batch_id = ?)"), (batch_id,))
            insert(cur, "replicas", _REPLICA_COLUMNS, replicas)
            insert(cur, "decisions", ("batch_id", "seq", "ts", "cluster", "topic", "partition", "kind", "record"),
                   [(batch_id, seq, d["ts"], d["cluster"], d["topic"], d["partition"], d["kind"],
                     _encode(d).decode()) for seq, d in enumerate(decisions)])
            insert(cur, "decision_brokers", ("batch_id", "seq", "broker"),
                   [(batch_id, seq, b) for seq, d in enumerate(decisions) for b in _decision_brokers(d)])
            insert(cur, "propagations", ("batch_id", "seq", "ts", "cluster", "broker", "trigger", "record"),
                   [(batch_id, seq, p["ts"], p["cluster"], p["broker"], p["trigger"], _encode(p).decode())
                    for seq, p in enumerate(propagations)])
            insert(cur, "propagation_partitions", ("batch_id", "seq", "topic", "partition"),
                   [(batch_id, seq, tp["topic"], tp["partition"])
                    for seq, p in enumerate(propagations) for tp in p["partitions"]])
            insert(cur, "dead_letters", ("batch_id", "seq", "ts", "reason", "field", "raw"),
                   [(batch_id, seq, d.get("ts"), d["reason"], d.get("field"), _raw_bytes(d["raw"]))
                    for seq, d in enumerate(dead_letters)])
            insert(cur, "brokers", ("cluster", "broker", "pending", "pending_count", "first_change_ts",
                                    "last_isr_change_ms", "last_propagation_ms"),
                   [(b["cluster"], b["broker"], _encode(b["pending"]).decode(), len(b["pending"]),
                     b["first_change_ts"], b["last_isr_change_ms"], b["last_propagation_ms"]) for b in brokers],
                   upsert_on=2)
            self._add_tallies(cur, batch_tallies(decisions, propagations, counters))
            insert(cur, "blobs", ("name", "value"), list(blobs.items()), upsert_on=1)
            insert(cur, "batches", ("batch_id", "committed_wall_ms", "watermark_ms", "decisions", "propagations",
                                    "partitions", "dead_letters"),
                   [(batch_id, _wall_ms(), watermark_ms, len(decisions), len(propagations), len(partitions),
                     len(dead_letters))])
        return True

    def _insert(self, cur: Any, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]],
                upsert_on: int = 0, updates: str | None = None) -> None:
        """Insert many rows; `upsert_on` = how many leading columns form the key, and a conflicting row
        replaces the other columns (or applies `updates`)."""
        if not rows:
            return
        conflict = ""
        if upsert_on:
            keys = ", ".join(columns[:upsert_on])
            updates = updates or ", ".join(f"{c} = excluded.{c}" for c in columns[upsert_on:])
            conflict = f" ON CONFLICT ({keys}) DO UPDATE SET {updates}"
        self.dialect.insert(cur, table, columns, rows, conflict)

    def _add_tallies(self, cur: Any, tallies: Mapping[tuple[str, str], float]) -> None:
        self._insert(cur, "tallies", ("metric", "labels", "value"),
                     [(metric, labels, value) for (metric, labels), value in tallies.items()],
                     upsert_on=2, updates="value = tallies.value + excluded.value")

    def record_progress(self, progress: Mapping[str, Any]) -> None:
        """Keep one stream-health row per micro-batch; a re-reported batch replaces its row, counted once."""
        values = tuple(progress.get(name) for name in PROGRESS_FIELDS)
        with self._transaction() as cur:
            cur.execute(self._q("SELECT 1 FROM progress WHERE batch_id = ?"), (values[0],))
            new = cur.fetchone() is None
            columns = ", ".join(PROGRESS_FIELDS)
            updates = ", ".join(f"{name} = excluded.{name}" for name in PROGRESS_FIELDS[1:])
            cur.execute(self._q(f"INSERT INTO progress ({columns}) VALUES ({', '.join('?' * len(values))})"
                                f" ON CONFLICT (batch_id) DO UPDATE SET {updates}"), values)
            if new:
                self._add_tallies(cur, {("stream_input_rows", _labels()): progress.get("input_rows") or 0})

    # -- reads for the job

    def last_batch_id(self) -> int | None:
        row = self._one("SELECT MAX(batch_id) FROM batches")
        return None if row is None else row[0]

    def load_blob(self, name: str) -> bytes | None:
        row = self._one("SELECT value FROM blobs WHERE name = ?", (name,))
        return None if row is None else bytes(row[0])

    # -- reads for the API

    def stream_position(self) -> StreamPosition | None:
        row = self._one("SELECT batch_id, committed_wall_ms, watermark_ms FROM batches ORDER BY batch_id DESC LIMIT 1")
        return None if row is None else StreamPosition(*row)

    def partitions(self, *, cluster: str | None = None, topic: str | None = None, broker: int | None = None,
                   state: str | None = None, now_ms: int | None = None, window_ms: int | None = None,
                   after: Key | None = None, limit: int = 100) -> Page:
        """Partition state records in (cluster, topic, partition) order, filtered like GET /v1/partitions.

        `state="shrink_predicted"` needs the event-time `now_ms`: an ISR follower whose eligible time is
        at most `now_ms + window_ms` (default window: half its lag).
        """
        where, params = [], []
        if cluster is not None:
            where.append("p.cluster = ?")
            params.append(cluster)
        if topic is not None:
            where.append("p.topic = ?")
            params.append(topic)
        if broker is not None:
            where.append("EXISTS (SELECT 1 FROM replicas r WHERE r.cluster = p.cluster AND r.topic = p.topic"
                         " AND r.partition = p.partition AND r.broker = ?)")
            params.append(broker)
        if state == "shrink_predicted":
            if now_ms is None:
                return Page([], None)
            condition, bound = _shrink_predicted(now_ms, window_ms)
            where.append(f"(p.cluster, p.topic, p.partition) IN (SELECT cluster, topic, partition FROM replicas"
                         f" WHERE {condition})")
            params.append(bound)
        elif state is not None:
            where.append(_FLAG_FILTERS[state])
        if after is not None:
            where.append("(p.cluster, p.topic, p.partition) > (?, ?, ?)")
            params.extend(after)
        sql = "SELECT p.record FROM partitions p"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY p.cluster, p.topic, p.partition LIMIT ?"
        rows = self._rows(sql, (*params, limit + 1))
        items = [_decode(r[0]) for r in rows[:limit]]
        more = len(rows) > limit
        return Page(items, (items[-1]["cluster"], items[-1]["topic"], items[-1]["partition"]) if more else None)

    def partition(self, topic: str, partition: int, cluster: str | None = None) -> list[dict]:
        """The state record of this topic-partition in every cluster that has it (or only in `cluster`)."""
        return [_decode(r[1]) for r in self._rows(*_one_partition("record", topic, partition, cluster))]

    def partition_isr(self, topic: str, partition: int,
                      cluster: str | None = None) -> list[tuple[str, int | None, int, list[int]]]:
        """(cluster, leader, leader_epoch, ISR) per matching cluster, without decoding whole records:
        the query other tools poll."""
        return [(c, leader, epoch, _decode(isr)) for c, leader, epoch, isr in self._rows(
            *_one_partition("leader, leader_epoch, isr", topic, partition, cluster))]

    def decisions(self, *, cluster: str | None = None, topic: str | None = None, partition: int | None = None,
                  kind: str | None = None, broker: int | None = None, since: int | None = None,
                  after: Key | None = None, limit: int = 100) -> Page:
        """Decisions newest first; `broker` matches the deciding leader or a replica whose membership changed."""
        where, params = _event_filters("d", cluster, topic, since)
        if partition is not None:
            where.append("d.partition = ?")
            params.append(partition)
        if kind is not None:
            where.append("d.kind = ?")
            params.append(kind)
        if broker is not None:
            where.append("EXISTS (SELECT 1 FROM decision_brokers b WHERE b.batch_id = d.batch_id"
                         " AND b.seq = d.seq AND b.broker = ?)")
            params.append(broker)
        return self._newest_first("decisions", "d", where, params, after, limit)

    def propagations(self, *, cluster: str | None = None, topic: str | None = None, broker: int | None = None,
                     trigger: str | None = None, since: int | None = None, after: Key | None = None,
                     limit: int = 100) -> Page:
        """ISR-change batches newest first; `topic` matches a batch that carries any of its partitions."""
        where, params = _event_filters("d", cluster, None, since)
        if topic is not None:
            where.append("EXISTS (SELECT 1 FROM propagation_partitions pp WHERE pp.batch_id = d.batch_id"
                         " AND pp.seq = d.seq AND pp.topic = ?)")
            params.append(topic)
        if broker is not None:
            where.append("d.broker = ?")
            params.append(broker)
        if trigger is not None:
            where.append("d.trigger = ?")
            params.append(trigger)
        return self._newest_first("propagations", "d", where, params, after, limit)

    def dead_letters(self, *, since: int | None = None, after: Key | None = None, limit: int = 100) -> Page:
        """Dead letters newest batch first (a dead letter's ts may be unknown, so the order is arrival)."""
        where, params = [], []
        if since is not None:
            where.append("d.ts >= ?")
            params.append(since)
        if after is not None:
            where.append("(d.batch_id, d.seq) < (?, ?)")
            params.extend(after)
        sql = "SELECT d.batch_id, d.seq, d.raw, d.reason, d.field, d.ts FROM dead_letters d"
        if where:
            sql += " WHERE " + " AND ".join(where)
        rows = self._rows(sql + " ORDER BY d.batch_id DESC, d.seq DESC LIMIT ?", (*params, limit + 1))
        items = [{"raw": bytes(r[2]).decode("utf-8", "surrogatepass"), "reason": r[3], "field": r[4], "ts": r[5]}
                 for r in rows[:limit]]
        return Page(items, tuple(rows[limit - 1][:2]) if len(rows) > limit else None)

    def _newest_first(self, table: str, alias: str, where: list[str], params: list[Any], after: Key | None,
                      limit: int) -> Page:
        if after is not None:
            where.append(f"({alias}.ts, {alias}.batch_id, {alias}.seq) < (?, ?, ?)")
            params.extend(after)
        sql = f"SELECT {alias}.ts, {alias}.batch_id, {alias}.seq, {alias}.record FROM {table} {alias}"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += f" ORDER BY {alias}.ts DESC, {alias}.batch_id DESC, {alias}.seq DESC LIMIT ?"
        rows = self._rows(sql, (*params, limit + 1))
        items = [_decode(r[3]) for r in rows[:limit]]
        return Page(items, tuple(rows[limit - 1][:3]) if len(rows) > limit else None)

    def brokers(self, cluster: str | None = None, broker: int | None = None) -> list[dict]:
        """Every broker that hosts a replica or has propagation state, with its replica counts."""
        cond, params = _broker_filter(cluster, broker)
        out: dict[tuple[str, int], dict] = {}
        for c, b, led, hosted, out_of_sync in self._rows(
                "SELECT cluster, broker, SUM(is_leader), COUNT(*), SUM(1 - in_sync) FROM replicas" + cond
                + " GROUP BY broker, cluster", params):
            out[(c, b)] = _broker(c, b, partitions_led=int(led), replicas=int(hosted), out_of_sync=int(out_of_sync))
        for state in self.broker_propagation(cluster, broker):
            key = (state["cluster"], state["broker"])
            out.setdefault(key, _broker(*key)).update(state)
        return [out[k] for k in sorted(out)]

    def broker_propagation(self, cluster: str | None = None, broker: int | None = None) -> list[dict]:
        """Each broker's pending ISR-change set and last propagation, without touching the replica rows.

        `last_propagation_ms` falls back to its last batch in the history when the writer kept no broker
        state (a replay).
        """
        cond, params = _broker_filter(cluster, broker)
        out: dict[tuple[str, int], dict] = {}
        for c, b, pending, first, last_change, last_prop in self._rows(
                "SELECT cluster, broker, pending, first_change_ts, last_isr_change_ms, last_propagation_ms"
                " FROM brokers" + cond, params):
            out[(c, b)] = _propagation_state(c, b, _decode(pending), first, last_change, last_prop)
        for c, b, last_prop in self._rows("SELECT cluster, broker, MAX(ts) FROM propagations" + cond
                                          + " GROUP BY broker, cluster", params):
            out.setdefault((c, b), _propagation_state(c, b, last_propagation_ms=last_prop))
        return [out[k] for k in sorted(out)]

    def out_of_sync_replicas(self, cluster: str, broker: int, limit: int = 100) -> list[dict]:
        """Replicas this broker hosts that are not in their partition's ISR, as the leader last saw them."""
        rows = self._rows("SELECT topic, partition, leo, lag_offsets, last_caught_up_ms FROM replicas"
                          " WHERE cluster = ? AND broker = ? AND in_sync = 0 ORDER BY topic, partition LIMIT ?",
                          (cluster, broker, limit))
        return [{"topic": t, "partition": p, "leo": leo, "lag_offsets": lag, "last_caught_up_ms": lcu}
                for t, p, leo, lag, lcu in rows]

    # -- reads for /metrics

    def partition_counts(self) -> list[tuple[str, int, int, int, int, int]]:
        """Per cluster: (cluster, total, under_replicated, under_min_isr, at_min_isr, offline)."""
        return [(c, *map(int, rest)) for c, *rest in self._rows(
            "SELECT cluster, COUNT(*), SUM(under_replicated), SUM(under_min_isr), SUM(at_min_isr), SUM(offline)"
            " FROM partitions GROUP BY cluster ORDER BY cluster")]

    def followers_predicted_to_shrink(self, now_ms: int, window_ms: int | None = None) -> dict[str, int]:
        condition, bound = _shrink_predicted(now_ms, window_ms)
        return dict(self._rows(f"SELECT cluster, COUNT(*) FROM replicas WHERE {condition} GROUP BY cluster",
                               (bound,)))

    def followers(self, *, order: str, limit: int | None = None, topics: Sequence[str] = ()) -> list[tuple]:
        """Follower rows (cluster, topic, partition, replica, last_caught_up_ms, lag_offsets, behind_in_isr).

        `order="caught_up"`: ISR followers behind the leader, longest since caught up first;
        `order="lag"`: followers behind the leader, the largest lag in offsets first;
        `order="topic"`: every follower of `topics` (the per-partition allow-list).
        """
        select = ("SELECT cluster, topic, partition, broker, last_caught_up_ms, lag_offsets,"
                  " shrink_eligible_at_ms IS NOT NULL FROM replicas")
        if order == "caught_up":
            rows = self._rows(select + " WHERE shrink_eligible_at_ms IS NOT NULL ORDER BY last_caught_up_ms,"
                              " cluster, topic, partition, broker LIMIT ?", (limit,))
        elif order == "lag":
            rows = self._rows(select + " WHERE lag_offsets > 0 ORDER BY lag_offsets DESC,"
                              " cluster, topic, partition, broker LIMIT ?", (limit,))
        elif order == "topic":
            if not topics:
                return []
            rows = self._rows(select + f" WHERE is_leader = 0 AND topic IN ({', '.join('?' * len(topics))})"
                              " ORDER BY cluster, topic, partition, broker", tuple(topics))
        else:
            raise ValueError(f"unknown follower order {order!r}")
        return [(*r[:6], bool(r[6])) for r in rows]

    def topic_partitions(self, topics: Sequence[str]) -> list[dict]:
        """Full records of every partition of `topics` (the per-partition metrics allow-list)."""
        if not topics:
            return []
        return [_decode(r[0]) for r in self._rows(
            f"SELECT record FROM partitions WHERE topic IN ({', '.join('?' * len(topics))})"
            " ORDER BY cluster, topic, partition", tuple(topics))]

    def tallies(self) -> list[tuple[str, dict[str, str], float]]:
        return [(m, json.loads(labels), float(v))
                for m, labels, v in self._rows("SELECT metric, labels, value FROM tallies ORDER BY metric, labels")]

    def latest_progress(self) -> dict | None:
        row = self._one(f"SELECT {', '.join(PROGRESS_FIELDS)} FROM progress ORDER BY batch_id DESC LIMIT 1")
        return None if row is None else dict(zip(PROGRESS_FIELDS, row, strict=True))


def _propagation_state(cluster: str, broker: int, pending: list | None = None, first_change_ts: int | None = None,
                       last_isr_change_ms: int | None = None, last_propagation_ms: int | None = None) -> dict:
    return {"cluster": cluster, "broker": broker, "pending": pending or [], "first_change_ts": first_change_ts,
            "last_isr_change_ms": last_isr_change_ms, "last_propagation_ms": last_propagation_ms}


def _broker(cluster: str, broker: int, partitions_led: int = 0, replicas: int = 0, out_of_sync: int = 0) -> dict:
    return {**_propagation_state(cluster, broker), "partitions_led": partitions_led, "replicas": replicas,
            "out_of_sync_replicas": out_of_sync}


def _shrink_predicted(now_ms: int, window_ms: int | None) -> tuple[str, int]:
    """The replicas condition for "past or near the lag limit" and its bound. The explicit IS NOT NULL lets
    SQLite see that the partial index applies (PostgreSQL infers it)."""
    column, bound = (("shrink_warning_at_ms", now_ms) if window_ms is None
                     else ("shrink_eligible_at_ms", now_ms + window_ms))
    return f"{column} <= ? AND {column} IS NOT NULL", bound


def _one_partition(columns: str, topic: str, partition: int, cluster: str | None) -> tuple[str, tuple]:
    sql = f"SELECT cluster, {columns} FROM partitions WHERE topic = ? AND partition = ?"
    if cluster is None:
        return sql + " ORDER BY cluster", (topic, partition)
    return sql + " AND cluster = ?", (topic, partition, cluster)


def _broker_filter(cluster: str | None, broker: int | None) -> tuple[str, list]:
    where, params = [], []
    for column, value in (("cluster", cluster), ("broker", broker)):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    return (" WHERE " + " AND ".join(where)) if where else "", params


def _decision_brokers(d: Mapping) -> set[int]:
    brokers = set(d["replicas_changed"])
    if d["leader"] is not None and d["leader"] >= 0:
        brokers.add(d["leader"])
    return brokers


def _event_filters(alias: str, cluster: str | None, topic: str | None, since: int | None) -> tuple[list, list]:
    where, params = [], []
    for column, value in (("cluster", cluster), ("topic", topic)):
        if value is not None:
            where.append(f"{alias}.{column} = ?")
            params.append(value)
    if since is not None:
        where.append(f"{alias}.ts >= ?")
        params.append(since)
    return where, params


def _raw_bytes(raw: str) -> bytes:
    """A dead letter's input kept byte for byte: it may hold NUL, which PostgreSQL text refuses."""
    return raw.encode("utf-8", "surrogatepass")


def _wall_ms() -> int:
    """Wall-clock commit time: the one clock reading here, used only to judge stream freshness."""
    return time.time_ns() // 1_000_000


def _redacted(url: str) -> str:
    """The URL without its password, for messages."""
    password = urlsplit(url).password
    return url.replace(f":{password}@", ":***@") if password else url


def open_store(url: str) -> Store:
    """Open (creating the schema if needed) the store at `url`: sqlite:///PATH, a file path or postgresql://..."""
    return Store(url)
