"""Writing the job's batches: one transaction per batch, idempotent by batch id, tallies counted at write time."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import msgspec

from isrwatch.state.events import IsrUpdated, Observed
from isrwatch.state.metrics import SOURCE_LOST_RECORDS, STREAM_INPUT_ROWS, TallyKey, tallies
from isrwatch.state.records import Decision, IsrState, PartitionRecord, shrink_warning_at
from isrwatch.state.step import Settled

from .schema import PARTITION_COLUMNS, PROGRESS_FIELDS, REPLICA_COLUMNS, TABLES, Database

_EMPTY: Mapping[Any, Any] = MappingProxyType({})
_encode = msgspec.json.encode


class Writer(Database):
    """The job's side of the store: batches, stream progress, and the blobs it resumes from."""

    def write_batch(
        self,
        batch_id: int,
        outputs: Settled | None = None,
        *,
        blobs: Mapping[str, bytes] = _EMPTY,
        watermark_ms: int | None = None,
        frontiers: Mapping[str, int] = _EMPTY,
        as_of: Mapping[tuple[str, str, int], int] = _EMPTY,
    ) -> bool:
        """Commit one micro-batch of outputs (a settled step: the job's batch, a replay, a test's cut; none: only
        blobs, watermark and frontiers) in one transaction; False (and no change) for a replayed id.

        Spark re-runs a failed batch with the same id and data, so a `batch_id` at or below the last
        committed one is skipped. A batch without a watermark keeps the previous one. `frontiers`: each
        cluster's settled event time (SPEC §6), kept as the readers' per-cluster "now"; `as_of`: the event
        time each partition record is exact at (default: the watermark).
        """
        out = outputs or Settled()
        decisions, propagations, divergences = out.decisions, out.propagations, out.divergences
        dead_letters, observed, brokers = out.dead_letters, out.observed, out.brokers
        requests = out.alter_partitions
        # One row per partition (the last record wins): a multi-row upsert may not touch a row twice.
        partitions = list({(r.cluster, r.topic, r.partition): r for r in out.records}.values())
        insert = self._insert
        with self._transaction() as cur:
            cur.execute(self._q("SELECT batch_id, watermark_ms FROM batches ORDER BY batch_id DESC LIMIT 1"))
            last = cur.fetchone()
            if last is not None and batch_id <= last[0]:
                return False
            if watermark_ms is None and last is not None:
                watermark_ms = last[1]
            self._put_partitions(
                cur,
                batch_id,
                [(r, as_of.get((r.cluster, r.topic, r.partition), watermark_ms)) for r in partitions],
            )
            insert(
                cur,
                "decisions",
                ("batch_id", "seq", "ts", "cluster", "topic", "partition", "kind", "record"),
                [
                    (batch_id, seq, d.ts, d.cluster, d.topic, d.partition, str(d.kind), _encode(d).decode())
                    for seq, d in enumerate(decisions)
                ],
            )
            insert(
                cur,
                "decision_brokers",
                ("batch_id", "seq", "broker"),
                [(batch_id, seq, b) for seq, d in enumerate(decisions) for b in _decision_brokers(d)],
            )
            insert(
                cur,
                "propagations",
                ("batch_id", "seq", "ts", "cluster", "broker", "trigger", "record"),
                [
                    (batch_id, seq, p.ts, p.cluster, p.broker, str(p.trigger), _encode(p).decode())
                    for seq, p in enumerate(propagations)
                ],
            )
            insert(
                cur,
                "propagation_partitions",
                ("batch_id", "seq", "topic", "partition"),
                [(batch_id, seq, tp.topic, tp.partition) for seq, p in enumerate(propagations) for tp in p.partitions],
            )
            insert(
                cur,
                "observed",
                ("batch_id", "seq", "ts", "cluster", "broker", "type", "topic", "partition", "record"),
                [(batch_id, seq, *_observed_columns(o), _encode(o).decode()) for seq, o in enumerate(observed)],
            )
            insert(
                cur,
                "divergences",
                (
                    "batch_id",
                    "seq",
                    "ts",
                    "cluster",
                    "broker",
                    "kind",
                    "cause",
                    "subject",
                    "topic",
                    "partition",
                    "record",
                ),
                [
                    (
                        batch_id,
                        seq,
                        d.ts,
                        d.cluster,
                        d.broker,
                        str(d.kind),
                        None if d.cause is None else str(d.cause),
                        d.subject,
                        d.topic,
                        d.partition,
                        _encode(d).decode(),
                    )
                    for seq, d in enumerate(divergences)
                ],
            )
            insert(
                cur,
                "alter_partitions",
                ("batch_id", "seq", "ts", "cluster", "broker", "record"),
                [
                    (batch_id, seq, r.response_ms, r.cluster, r.broker, _encode(r).decode())
                    for seq, r in enumerate(requests)
                ],
            )
            insert(
                cur,
                "alter_partition_items",
                ("batch_id", "seq", "topic", "partition", "outcome"),
                [
                    (batch_id, seq, i.topic, i.partition, i.error or "committed")
                    for seq, r in enumerate(requests)
                    for i in r.partitions
                ],
            )
            insert(
                cur,
                "dead_letters",
                ("batch_id", "seq", "ts", "reason", "field", "raw"),
                [(batch_id, seq, d.ts, d.reason, d.field, _raw_bytes(d.raw)) for seq, d in enumerate(dead_letters)],
            )
            insert(
                cur,
                "brokers",
                (
                    "cluster",
                    "broker",
                    "pending",
                    "pending_count",
                    "first_change_ts",
                    "last_isr_change_ms",
                    "last_propagation_ms",
                    "queue",
                    "in_flight",
                    "in_flight_sent_ms",
                    "clock_offset_ms",
                ),
                [
                    (
                        b.cluster,
                        b.broker,
                        _encode(b.pending).decode(),
                        len(b.pending),
                        b.first_change_ts,
                        b.last_isr_change_ms,
                        b.last_propagation_ms,
                        None if b.queue is None else _encode(b.queue).decode(),
                        None if b.in_flight is None else _encode(b.in_flight).decode(),
                        None if b.in_flight is None else b.in_flight.sent_ms,
                        b.clock_offset_ms,
                    )
                    for b in brokers
                ],
                upsert_on=2,
            )
            self._write_incidents(cur, batch_id, out)
            opened = [(i.cluster, str(i.kind)) for i in out.opened]
            increments = tallies(decisions, propagations, +out.counters, divergences, requests, opened, out.committed)
            self._add_tallies(cur, increments)
            insert(cur, "blobs", ("name", "value"), list(blobs.items()), upsert_on=1)
            insert(cur, "clusters", ("cluster", "frontier_ms"), sorted(frontiers.items()), upsert_on=1)
            insert(
                cur,
                "batches",
                (
                    "batch_id",
                    "committed_wall_ms",
                    "watermark_ms",
                    "decisions",
                    "propagations",
                    "partitions",
                    "dead_letters",
                ),
                [
                    (
                        batch_id,
                        _wall_ms(),
                        watermark_ms,
                        len(decisions),
                        len(propagations),
                        len(partitions) if out.partitions_written is None else out.partitions_written,
                        len(dead_letters),
                    )
                ],
            )
        return True

    def _write_incidents(self, cur: Any, batch_id: int, out: Settled) -> None:
        """The step's incidents (each replaces its row) and the timeline's additions; the timeline keeps
        `timeline_retention_ms` of event time per cluster (`Timeline.horizons`)."""
        insert, timeline = self._insert, out.timeline
        insert(
            cur,
            "incidents",
            ("id", "cluster", "kind", "brokers", "opened_ms", "closed_ms", "worst", "record"),
            [
                (
                    i.id,
                    i.cluster,
                    str(i.kind),
                    "," + "".join(f"{b}," for b in i.brokers),
                    i.opened_ms,
                    i.closed_ms,
                    None if i.worst is None else str(i.worst),
                    _encode(i).decode(),
                )
                for i in out.incidents
            ],
            upsert_on=1,
        )
        insert(
            cur,
            "timeline_counts",
            ("cluster", "ts", "under_replicated", "under_min_isr", "offline"),
            [(c.cluster, c.ts, c.under_replicated, c.under_min_isr, c.offline) for c in timeline.counts],
            upsert_on=2,
        )
        insert(
            cur,
            "timeline_intervals",
            ("cluster", "broker", "kind", "start_ms", "end_ms", "partitions"),
            [(i.cluster, i.broker, i.kind, i.start_ms, i.end_ms, i.partitions) for i in timeline.intervals],
            upsert_on=4,
        )
        insert(
            cur,
            "timeline_markers",
            ("batch_id", "seq", "cluster", "ts", "kind", "broker", "topic", "partition", "text"),
            [
                (batch_id, seq, m.cluster, m.ts, m.kind, m.broker, m.topic, m.partition, m.text)
                for seq, m in enumerate(timeline.markers)
            ],
        )
        for cluster, horizon in sorted(timeline.horizons.items()):
            for sql in (
                "DELETE FROM timeline_counts WHERE cluster = ? AND ts < ?",
                "DELETE FROM timeline_intervals WHERE cluster = ? AND end_ms < ?",
                "DELETE FROM timeline_markers WHERE cluster = ? AND ts < ?",
                "DELETE FROM incidents WHERE cluster = ? AND closed_ms < ?",
            ):
                cur.execute(self._q(sql), (cluster, horizon))

    def write_partitions(self, batch_id: int, rows: Sequence[tuple[PartitionRecord, int]]) -> bool:
        """One state key's partition rows of a micro-batch (record, the event time it is exact at), written by the
        executor that ran the key, in one transaction of its own before the driver commits the batch; False (and no
        change) once that batch is committed. A batch run again writes the same rows: upserts, so nothing doubles."""
        with self._transaction() as cur:
            cur.execute(self._q("SELECT MAX(batch_id) FROM batches"))
            last = cur.fetchone()[0]
            if last is not None and batch_id <= last:
                return False
            self._put_partitions(cur, batch_id, rows)
        return True

    def _put_partitions(self, cur: Any, batch_id: int, rows: Sequence[tuple[PartitionRecord, int | None]]) -> None:
        """Upsert partition rows and replace their replicas rows (one partition once: a multi-row upsert may not touch
        a row twice)."""
        if not rows:
            return
        partitions, replicas = [], []
        for record, as_of in rows:
            row, reps = _partition_rows(record, batch_id, as_of)
            partitions.append(row)
            replicas.extend(reps)
        self._insert(cur, "partitions", PARTITION_COLUMNS, partitions, upsert_on=3)
        self.dialect.delete(cur, "replicas", REPLICA_COLUMNS[:3], [row[:3] for row in partitions])
        self._insert(cur, "replicas", REPLICA_COLUMNS, replicas)

    def _insert(
        self,
        cur: Any,
        table: str,
        columns: Sequence[str],
        rows: Sequence[Sequence[Any]],
        upsert_on: int = 0,
        updates: str | None = None,
    ) -> None:
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

    def _add_tallies(self, cur: Any, increments: Mapping[TallyKey, float]) -> None:
        self._insert(
            cur,
            "tallies",
            ("metric", "labels", "value"),
            [(tally, _labels_json(labels), value) for (tally, labels), value in increments.items()],
            upsert_on=2,
            updates="value = tallies.value + excluded.value",
        )

    def record_progress(self, progress: Mapping[str, Any]) -> None:
        """Keep one stream-health row per micro-batch; a re-reported batch replaces its row, counted once, with
        the Kafka records its source lost (`lost_records`: (topic, partition, count) triples)."""
        values = tuple(progress.get(name) for name in PROGRESS_FIELDS)
        with self._transaction() as cur:
            cur.execute(self._q("SELECT 1 FROM progress WHERE batch_id = ?"), (values[0],))
            new = cur.fetchone() is None
            columns = ", ".join(PROGRESS_FIELDS)
            updates = ", ".join(f"{name} = excluded.{name}" for name in PROGRESS_FIELDS[1:])
            cur.execute(
                self._q(
                    f"INSERT INTO progress ({columns}) VALUES ({', '.join('?' * len(values))})"
                    f" ON CONFLICT (batch_id) DO UPDATE SET {updates}"
                ),
                values,
            )
            if new:
                increments: dict[TallyKey, float] = {(STREAM_INPUT_ROWS.tally, ()): progress.get("input_rows") or 0}
                for topic, partition, count in progress.get("lost_records") or ():
                    key = (SOURCE_LOST_RECORDS.tally, (("partition", str(partition)), ("topic", topic)))
                    increments[key] = increments.get(key, 0) + count
                self._add_tallies(cur, increments)

    def claim(self, job: Mapping[str, Any]) -> None:
        """Record the streaming job that writes this store (its name, host, pid, checkpoint), so that nothing
        else writes batches into it: the job's batch ids must stay its own."""
        with self._transaction() as cur:
            self._insert(
                cur, "meta", ("key", "value"), [("writer", json.dumps(dict(job), sort_keys=True))], upsert_on=1
            )

    def clear(self) -> None:
        """Delete every batch and the writer's claim, keeping the schema: `isrwatch demo` plays each story on an
        empty store."""
        with self._transaction() as cur:
            for table in TABLES:
                if table != "meta":  # it keeps the schema's version
                    cur.execute(f"DELETE FROM {table}")
            cur.execute("DELETE FROM meta WHERE key = 'writer'")

    def holder(self) -> dict[str, Any] | None:
        """The streaming job that writes this store, as it recorded itself (None: no job has)."""
        row = self._one("SELECT value FROM meta WHERE key = 'writer'")
        return None if row is None else dict(json.loads(row[0]))

    # -- reads for the job

    def last_batch_id(self) -> int | None:
        row = self._one("SELECT MAX(batch_id) FROM batches")
        return None if row is None else row[0]

    def load_blob(self, name: str) -> bytes | None:
        row = self._one("SELECT value FROM blobs WHERE name = ?", (name,))
        return None if row is None else bytes(row[0])


def _partition_rows(
    record: PartitionRecord, batch_id: int, as_of: int | None
) -> tuple[tuple[Any, ...], list[tuple[Any, ...]]]:
    """The partitions row and the replicas rows (one per assigned replica) of a SPEC §5 state record."""
    key = (record.cluster, record.topic, record.partition)
    isr = set(record.isr)
    leader = record.leader
    row = (
        *key,
        leader,
        record.leader_epoch,
        _encode(record.isr).decode(),
        int(record.under_replicated),
        int(record.under_min_isr),
        int(record.at_min_isr),
        int(record.offline),
        int(record.isr_state not in (None, IsrState.COMMITTED)),
        record.pending_since_ms,
        _encode(record).decode(),
        batch_id,
        as_of,
    )
    followers = {f.replica: f for f in record.followers}
    replicas: list[tuple[Any, ...]] = []
    for broker in record.replicas:
        f = followers.get(broker)
        if f is None:  # the leader (or a replica of a partition without an accepted leader)
            replicas.append((*key, broker, int(broker == leader), int(broker in isr), None, None, None, None, None))
            continue
        eligible = f.shrink_eligible_at_ms
        warning = None if eligible is None else shrink_warning_at(eligible, f.last_caught_up_ms)
        replicas.append((*key, broker, 0, int(f.in_sync), f.leo, f.lag_offsets, f.last_caught_up_ms, eligible, warning))
    return row, replicas


def _observed_columns(o: Observed) -> tuple[Any, ...]:
    """(ts, cluster, broker, type, topic, partition) of what a broker did."""
    if isinstance(o, IsrUpdated):
        return (o.ts, o.cluster, o.broker, "isr_updated", o.topic, o.partition)
    return (o.ts, o.cluster, o.broker, o.__struct_config__.tag, None, None)


def _decision_brokers(d: Decision) -> set[int]:
    brokers = set(d.replicas_changed)
    if d.leader is not None and d.leader >= 0:
        brokers.add(d.leader)
    return brokers


def _labels_json(labels: Iterable[tuple[str, str]]) -> str:
    return json.dumps(dict(labels), sort_keys=True, separators=(",", ":"))


def _raw_bytes(raw: str) -> bytes:
    """A dead letter's input kept byte for byte: it may hold NUL, which PostgreSQL text refuses."""
    return raw.encode("utf-8", "surrogatepass")


def _wall_ms() -> int:
    """Wall-clock commit time: the one clock reading here, used only to judge stream freshness."""
    return time.time_ns() // 1_000_000
