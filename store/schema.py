"""The store's schema and the database under it: DDL, the two dialects, connections and transactions.

One schema, two databases: SQLite (stdlib, WAL so the API reads while the job writes) and PostgreSQL
(psycopg 3). The SQL is written once with `?` placeholders; the dialect layer only swaps
placeholders, the blob type, the DDL lock and how bulk rows get in (COPY on PostgreSQL).
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self
from urllib.parse import urlsplit

# 4: divergences.cause; 5: AlterPartition (isr_pending, brokers' queue and in-flight request, alter_partitions);
# 6: brokers.clock_offset_ms; 7: incidents and the timeline's history (SPEC §8)
SCHEMA_VERSION = 7
# How a store of an older version becomes the next one, keeping its data: version -> its statements (a version whose
# change is new tables only has none: the DDL creates them).
MIGRATIONS: dict[int, tuple[str, ...]] = {5: ("ALTER TABLE brokers ADD COLUMN clock_offset_ms BIGINT",), 6: ()}


class StoreError(RuntimeError):
    """The store cannot be opened or used (bad URL, unreachable server, schema from another version)."""


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
    isr_pending SMALLINT NOT NULL, pending_since_ms BIGINT,
    record TEXT NOT NULL, batch_id BIGINT NOT NULL, as_of_ms BIGINT, PRIMARY KEY (cluster, topic, partition));
CREATE INDEX IF NOT EXISTS partitions_under_replicated ON partitions (cluster, topic, partition)
    WHERE under_replicated = 1;
CREATE INDEX IF NOT EXISTS partitions_under_min_isr ON partitions (cluster, topic, partition)
    WHERE under_min_isr = 1;
CREATE INDEX IF NOT EXISTS partitions_at_min_isr ON partitions (cluster, topic, partition) WHERE at_min_isr = 1;
CREATE INDEX IF NOT EXISTS partitions_offline ON partitions (cluster, topic, partition) WHERE offline = 1;
CREATE INDEX IF NOT EXISTS partitions_isr_pending ON partitions (cluster, topic, partition) WHERE isr_pending = 1;
CREATE INDEX IF NOT EXISTS partitions_pending_leader ON partitions (cluster, leader, pending_since_ms)
    WHERE isr_pending = 1;
CREATE INDEX IF NOT EXISTS partitions_topic ON partitions (topic, cluster, partition);
CREATE INDEX IF NOT EXISTS partitions_batch ON partitions (batch_id);
CREATE INDEX IF NOT EXISTS partitions_flags
    ON partitions (cluster, under_replicated, under_min_isr, at_min_isr, offline, isr_pending);
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
CREATE TABLE IF NOT EXISTS observed (
    batch_id BIGINT NOT NULL, seq INTEGER NOT NULL, ts BIGINT NOT NULL, cluster TEXT NOT NULL,
    broker INTEGER NOT NULL, type TEXT NOT NULL, topic TEXT, partition INTEGER, record TEXT NOT NULL,
    PRIMARY KEY (batch_id, seq));
CREATE INDEX IF NOT EXISTS observed_time ON observed (ts, batch_id, seq);
CREATE INDEX IF NOT EXISTS observed_partition ON observed (cluster, topic, partition, ts, batch_id, seq);
CREATE INDEX IF NOT EXISTS observed_broker ON observed (broker, cluster, ts, batch_id, seq);
CREATE TABLE IF NOT EXISTS divergences (
    batch_id BIGINT NOT NULL, seq INTEGER NOT NULL, ts BIGINT NOT NULL, cluster TEXT NOT NULL,
    broker INTEGER NOT NULL, kind TEXT NOT NULL, cause TEXT, subject TEXT NOT NULL, topic TEXT, partition INTEGER,
    record TEXT NOT NULL, PRIMARY KEY (batch_id, seq));
CREATE INDEX IF NOT EXISTS divergences_time ON divergences (ts, batch_id, seq);
CREATE INDEX IF NOT EXISTS divergences_partition ON divergences (cluster, topic, partition, ts, batch_id, seq);
CREATE INDEX IF NOT EXISTS divergences_kind ON divergences (kind, ts, batch_id, seq);
CREATE INDEX IF NOT EXISTS divergences_cause ON divergences (cause, ts, batch_id, seq) WHERE cause IS NOT NULL;
-- AlterPartition requests (ts: the answer of the last partition) and, per partition carried, its outcome.
CREATE TABLE IF NOT EXISTS alter_partitions (batch_id BIGINT NOT NULL, seq INTEGER NOT NULL, ts BIGINT NOT NULL,
    cluster TEXT NOT NULL, broker INTEGER NOT NULL, record TEXT NOT NULL, PRIMARY KEY (batch_id, seq));
CREATE TABLE IF NOT EXISTS alter_partition_items (batch_id BIGINT NOT NULL, seq INTEGER NOT NULL,
    topic TEXT NOT NULL, partition INTEGER NOT NULL, outcome TEXT NOT NULL,
    PRIMARY KEY (batch_id, seq, topic, partition));
CREATE INDEX IF NOT EXISTS alter_partitions_time ON alter_partitions (ts, batch_id, seq);
CREATE INDEX IF NOT EXISTS alter_partitions_broker ON alter_partitions (broker, cluster, ts, batch_id, seq);
CREATE TABLE IF NOT EXISTS dead_letters (
    batch_id BIGINT NOT NULL, seq INTEGER NOT NULL, ts BIGINT, reason TEXT NOT NULL, field TEXT,
    raw {blob} NOT NULL, PRIMARY KEY (batch_id, seq));
CREATE TABLE IF NOT EXISTS brokers (
    cluster TEXT NOT NULL, broker INTEGER NOT NULL, pending TEXT NOT NULL, pending_count INTEGER NOT NULL,
    first_change_ts BIGINT, last_isr_change_ms BIGINT NOT NULL, last_propagation_ms BIGINT NOT NULL,
    queue TEXT, in_flight TEXT, in_flight_sent_ms BIGINT, clock_offset_ms BIGINT, PRIMARY KEY (cluster, broker));
CREATE TABLE IF NOT EXISTS tallies (
    metric TEXT NOT NULL, labels TEXT NOT NULL, value DOUBLE PRECISION NOT NULL, PRIMARY KEY (metric, labels));
CREATE TABLE IF NOT EXISTS clusters (cluster TEXT PRIMARY KEY, frontier_ms BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS blobs (name TEXT PRIMARY KEY, value {blob} NOT NULL);
-- Incidents (one row each, replaced as it changes, brokers as ",2,3," for the broker filter) and the timeline.
CREATE TABLE IF NOT EXISTS incidents (id TEXT PRIMARY KEY, cluster TEXT NOT NULL, kind TEXT NOT NULL,
    brokers TEXT NOT NULL, opened_ms BIGINT NOT NULL, closed_ms BIGINT, worst TEXT, record TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS incidents_time ON incidents (opened_ms, id);
CREATE INDEX IF NOT EXISTS incidents_open ON incidents (cluster, kind) WHERE closed_ms IS NULL;
CREATE TABLE IF NOT EXISTS timeline_counts (cluster TEXT NOT NULL, ts BIGINT NOT NULL,
    under_replicated INTEGER NOT NULL, under_min_isr INTEGER NOT NULL, offline INTEGER NOT NULL,
    PRIMARY KEY (cluster, ts));
CREATE TABLE IF NOT EXISTS timeline_intervals (cluster TEXT NOT NULL, broker INTEGER NOT NULL, kind TEXT NOT NULL,
    start_ms BIGINT NOT NULL, end_ms BIGINT, partitions INTEGER NOT NULL,
    PRIMARY KEY (cluster, broker, kind, start_ms));
CREATE INDEX IF NOT EXISTS timeline_intervals_end ON timeline_intervals (cluster, end_ms);
CREATE TABLE IF NOT EXISTS timeline_markers (batch_id BIGINT NOT NULL, seq INTEGER NOT NULL, cluster TEXT NOT NULL,
    ts BIGINT NOT NULL, kind TEXT NOT NULL, broker INTEGER, topic TEXT, partition INTEGER, text TEXT NOT NULL,
    PRIMARY KEY (batch_id, seq));
CREATE INDEX IF NOT EXISTS timeline_markers_time ON timeline_markers (cluster, ts);
CREATE TABLE IF NOT EXISTS progress (
    batch_id BIGINT PRIMARY KEY, wall_ms BIGINT, watermark_ms BIGINT, input_rows BIGINT,
    input_rows_per_second DOUBLE PRECISION, processed_rows_per_second DOUBLE PRECISION,
    batch_duration_ms BIGINT, state_rows BIGINT, late_rows BIGINT);
"""

TABLES = tuple(re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", _DDL))
PARTITION_COLUMNS = (
    "cluster",
    "topic",
    "partition",
    "leader",
    "leader_epoch",
    "isr",
    "under_replicated",
    "under_min_isr",
    "at_min_isr",
    "offline",
    "isr_pending",
    "pending_since_ms",
    "record",
    "batch_id",
    "as_of_ms",
)
REPLICA_COLUMNS = (
    "cluster",
    "topic",
    "partition",
    "broker",
    "is_leader",
    "in_sync",
    "leo",
    "lag_offsets",
    "last_caught_up_ms",
    "shrink_eligible_at_ms",
    "shrink_warning_at_ms",
)
PROGRESS_FIELDS = (
    "batch_id",
    "wall_ms",
    "watermark_ms",
    "input_rows",
    "input_rows_per_second",
    "processed_rows_per_second",
    "batch_duration_ms",
    "state_rows",
    "late_rows",
)


class _Dialect:
    """What differs between the databases, and nothing else: SQLite's way here, PostgreSQL's in the subclass."""

    name = "sqlite"
    blob = "BLOB"

    def sql(self, text: str) -> str:
        return text

    def ddl_lock(self, cur: Any) -> None:
        """Serialise schema creation between processes (SQLite: BEGIN IMMEDIATE already does)."""

    def insert(
        self, cur: Any, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], conflict: str
    ) -> None:
        """Bulk insert: sqlite3's executemany loops in C."""
        cur.executemany(
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})" + conflict, rows
        )

    def delete(self, cur: Any, table: str, columns: Sequence[str], keys: Sequence[Sequence[Any]]) -> None:
        """Delete the rows whose `columns` equal one of `keys` (a prefix of the table's primary key)."""
        cur.executemany(f"DELETE FROM {table} WHERE " + " AND ".join(f"{c} = ?" for c in columns), keys)


class _Postgres(_Dialect):
    name = "postgresql"
    blob = "BYTEA"

    def sql(self, text: str) -> str:
        return text.replace("?", "%s")

    def ddl_lock(self, cur: Any) -> None:
        cur.execute("SELECT pg_advisory_xact_lock(7150001)")

    def insert(
        self, cur: Any, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], conflict: str
    ) -> None:
        """Bulk insert with COPY (psycopg's executemany pays Python overhead per row and per parameter);
        an upsert goes through a temporary staging table, since COPY cannot resolve conflicts."""
        names = ", ".join(columns)
        if not conflict:
            _copy(cur, table, names, rows)
            return
        target = f"isrwatch_stage_{table}"
        _staged(cur, target, f"(LIKE {table}) ON COMMIT DELETE ROWS", names, rows)
        cur.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM {target}{conflict}")

    def delete(self, cur: Any, table: str, columns: Sequence[str], keys: Sequence[Sequence[Any]]) -> None:
        """The keys go in by COPY to a temporary table, then one DELETE joins it."""
        names = ", ".join(columns)
        staged = f"isrwatch_keys_{table}"
        _staged(cur, staged, f"AS SELECT {names} FROM {table} WITH NO DATA", names, keys)
        match = " AND ".join(f"t.{c} = k.{c}" for c in columns)
        cur.execute(f"DELETE FROM {table} t USING {staged} k WHERE {match}")


def _sqlite_path(url: str) -> str:
    if url.startswith("sqlite:///"):
        rest = url[len("sqlite:///") :]
        return rest if rest.startswith("/") else str(Path(rest).resolve())
    if url.startswith("sqlite:"):
        raise StoreError(f"store URL {url!r}: use sqlite:///relative/path.db or sqlite:////absolute/path.db")
    return url


class Database:
    """A connection per thread (the API answers from a thread pool; the sink writes from one thread),
    the schema created on open, and the query helpers the writer and the reader share."""

    def __init__(self, url: str) -> None:
        self.url = url
        scheme = urlsplit(url).scheme
        if scheme in ("postgresql", "postgres"):
            self.dialect: _Dialect = _Postgres()
        elif scheme in ("", "sqlite") or len(scheme) == 1:  # a bare path (a Windows drive letter is a path too)
            self.dialect = _Dialect()
            self._path = _sqlite_path(url)
            Path(self._path).parent.mkdir(parents=True, exist_ok=True)  # the default, var/isrwatch.db, in a new clone
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

    @property
    def absolute_url(self) -> str:
        """The store's URL as any process, whatever its working directory, opens the same database with."""
        return f"sqlite:///{Path(self._path).resolve()}" if self.dialect.name == "sqlite" else self.url

    def close(self) -> None:
        """Close every thread's connection (the store can be used again; it reconnects on demand)."""
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _q(self, text: str) -> str:
        sql = self._sql_cache.get(text)
        if sql is None:
            sql = self._sql_cache[text] = self.dialect.sql(text)
        return sql

    def _rows(self, text: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        cur = self._conn().cursor()
        try:
            cur.execute(self._q(text), params)
            rows: list[tuple[Any, ...]] = cur.fetchall()
            return rows
        finally:
            cur.close()

    def _one(self, text: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
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
            meta, *tables = [s for s in _DDL.format(blob=self.dialect.blob).split(";") if s.strip()]
            cur.execute(meta)  # the version first: another version's tables may lack what this one's DDL indexes
            cur.execute(self._q("SELECT value FROM meta WHERE key = 'schema_version'"))
            row = cur.fetchone()
            if row is not None and self._migrate(cur, row[0]) != str(SCHEMA_VERSION):
                raise StoreError(
                    f"store {_redacted(self.url)} has schema version {row[0]}, this isrwatch writes {SCHEMA_VERSION}"
                )
            for statement in tables:
                cur.execute(statement)
            if row is None:
                cur.execute(
                    self._q("INSERT INTO meta (key, value) VALUES ('schema_version', ?)"), (str(SCHEMA_VERSION),)
                )

    def _migrate(self, cur: Any, stored: str) -> str:
        """Bring a store of an older version that `MIGRATIONS` knows up to date, in the same transaction; returns
        the version it has now (another version's as it is)."""
        if not stored.isdigit() or int(stored) not in MIGRATIONS:
            return stored
        version = int(stored)
        while version in MIGRATIONS:
            for statement in MIGRATIONS[version]:
                cur.execute(statement)
            version += 1
        cur.execute(self._q("UPDATE meta SET value = ? WHERE key = 'schema_version'"), (str(version),))
        return str(version)

    # -- writes


def _redacted(url: str) -> str:
    """The URL without its password, for messages."""
    password = urlsplit(url).password
    return url.replace(f":{password}@", ":***@") if password else url


def _copy(cur: Any, table: str, names: str, rows: Iterable[Sequence[Any]]) -> None:
    """Rows into `table`'s columns `names` by COPY."""
    with cur.copy(f"COPY {table} ({names}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


def _staged(cur: Any, staged: str, definition: str, names: str, rows: Iterable[Sequence[Any]]) -> None:
    """Rows into an emptied temporary table `staged` (made once per session by `definition`), for one statement
    to join: COPY cannot resolve conflicts or delete."""
    cur.execute(f"CREATE TEMP TABLE IF NOT EXISTS {staged} {definition}")
    cur.execute(f"TRUNCATE {staged}")
    _copy(cur, staged, names, rows)
