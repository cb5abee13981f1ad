"""Reading for the API and /metrics: keyset pages, point reads, counts, and the store's "now".

Records come back as the typed SPEC §5 records the engine produced. Event-time "now" for readers is the
settled watermark of the last batch; the only wall-clock value kept is when a batch committed, which
says how fresh the stream is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar

import msgspec

from isrwatch.state.incidents import INTERNAL_FIELDS
from isrwatch.state.metrics import PARTITION_FLAGS, SOURCE_LOST_RECORDS
from isrwatch.state.records import (
    AlterPartitionRequest,
    Decision,
    DecisionKind,
    PartitionRecord,
    PartitionState,
    Propagation,
)

from .schema import PROGRESS_FIELDS, Database

_decode = msgspec.json.decode
_partition = msgspec.json.Decoder(PartitionRecord).decode
_PROPOSED = (DecisionKind.SHRINK, DecisionKind.EXPAND)
_decoders: dict[type, Any] = {
    Decision: msgspec.json.Decoder(Decision).decode,
    Propagation: msgspec.json.Decoder(Propagation).decode,
    AlterPartitionRequest: msgspec.json.Decoder(AlterPartitionRequest).decode,
    dict: msgspec.json.Decoder(dict[str, Any]).decode,  # observed events and divergences, as JSON objects
}
T = TypeVar("T")
# Fixed SQL per flag: a literal (not a parameter) so both planners can use the partial indexes.
_FLAG_FILTERS = {flag: f"p.{flag} = 1" for flag in PARTITION_FLAGS}

Key = tuple[Any, ...]
# The live audit's tables and the columns each is filtered on by equality, in filter order.
AUDIT_COLUMNS = {
    "observed": ("cluster", "broker", "topic", "partition", "type"),
    "divergences": ("cluster", "broker", "topic", "partition", "kind", "cause", "subject"),
}


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a keyset-paginated read; `next_key` is the last row's key when more rows follow."""

    items: list[T]
    next_key: Key | None


@dataclass(frozen=True)
class EventTime:
    """Event-time "now" per cluster (SPEC §6): how far each cluster is settled; `latest`, the last batch's
    watermark, stands for a cluster the store has no frontier of (a replay's store)."""

    latest: int | None
    clusters: Mapping[str, int]

    def of(self, cluster: str) -> int | None:
        return self.clusters.get(cluster, self.latest)


@dataclass(frozen=True)
class StreamPosition:
    """What the last committed batch says about the stream: its id, wall-clock commit time, watermark."""

    batch_id: int
    committed_wall_ms: int
    watermark_ms: int | None


class Reader(Database):
    """The API's side of the store."""

    def stream_position(self) -> StreamPosition | None:
        row = self._one("SELECT batch_id, committed_wall_ms, watermark_ms FROM batches ORDER BY batch_id DESC LIMIT 1")
        return None if row is None else StreamPosition(*row)

    def event_time(self) -> EventTime:
        """Event-time "now" for readers: each cluster's settled frontier, the last batch's watermark for the rest."""
        position = self.stream_position()
        clusters = dict(self._rows("SELECT cluster, frontier_ms FROM clusters"))
        return EventTime(None if position is None else position.watermark_ms, clusters)

    def partitions(
        self,
        *,
        cluster: str | None = None,
        topic: str | None = None,
        broker: int | None = None,
        state: PartitionState | None = None,
        now: EventTime | None = None,
        window_ms: int | None = None,
        after: Key | None = None,
        limit: int = 100,
    ) -> Page[PartitionRecord]:
        """Partition state records in (cluster, topic, partition) order, filtered like GET /v1/partitions.

        `state="shrink_predicted"` judges at event time `now` (default: the store's): an ISR follower whose
        eligible time is at most its cluster's now + `window_ms` (default window: half its lag).
        """
        where, params = _equal(("p.cluster", cluster), ("p.topic", topic))
        if broker is not None:
            where.append(
                "EXISTS (SELECT 1 FROM replicas r WHERE r.cluster = p.cluster AND r.topic = p.topic"
                " AND r.partition = p.partition AND r.broker = ?)"
            )
            params.append(broker)
        if state == PartitionState.SHRINK_PREDICTED:
            condition, bounds = _shrink_predicted(now or self.event_time(), window_ms)
            if condition is None:
                return Page([], None)
            where.append(
                f"(p.cluster, p.topic, p.partition) IN (SELECT cluster, topic, partition FROM replicas"
                f" WHERE {condition})"
            )
            params.extend(bounds)
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
        items = [_partition(r[0]) for r in rows[:limit]]
        last = items[-1] if len(rows) > limit else None
        return Page(items, None if last is None else (last.cluster, last.topic, last.partition))

    def partition(self, topic: str, partition: int, cluster: str | None = None) -> list[PartitionRecord]:
        """The state record of this topic-partition in every cluster that has it (or only in `cluster`)."""
        return [_partition(r[1]) for r in self._rows(*_one_partition("record", topic, partition, cluster))]

    def partition_as_of(self) -> dict[tuple[str, str, int], int | None]:
        """The event time each stored partition record is exact at (its state key's frontier when written)."""
        return {
            (c, t, p): at for c, t, p, at in self._rows("SELECT cluster, topic, partition, as_of_ms FROM partitions")
        }

    def partition_isr(
        self, topic: str, partition: int, cluster: str | None = None
    ) -> list[tuple[str, int | None, int, list[int], list[int] | None]]:
        """(cluster, leader, leader_epoch, ISR, ELR) per matching cluster, without decoding whole records (the ELR,
        KRaft's only, is the one field read from the record): the query other tools poll."""
        return [
            (c, leader, epoch, _decode(isr), _elr_of(record).elr)
            for c, leader, epoch, isr, record in self._rows(
                *_one_partition("leader, leader_epoch, isr, record", topic, partition, cluster)
            )
        ]

    def decisions(
        self,
        *,
        cluster: str | None = None,
        topic: str | None = None,
        partition: int | None = None,
        kind: str | None = None,
        broker: int | None = None,
        since: int | None = None,
        after: Key | None = None,
        limit: int = 100,
    ) -> Page[Decision]:
        """Decisions newest first; `broker` matches the deciding leader or a replica whose membership changed."""
        where, params = _event_filters(
            ("d.cluster", cluster), ("d.topic", topic), ("d.partition", partition), ("d.kind", kind), since=since
        )
        if broker is not None:
            where.append(
                "EXISTS (SELECT 1 FROM decision_brokers b WHERE b.batch_id = d.batch_id"
                " AND b.seq = d.seq AND b.broker = ?)"
            )
            params.append(broker)
        return self._newest_first(Decision, "decisions", where, params, after, limit)

    def proposal_outcomes(self, decisions: Sequence[Decision]) -> list[dict[str, Any] | None]:
        """For each decision, when it is a proposal (a shrink or expand of a leader that proposes with AlterPartition,
        SPEC §4.9), its fate: `committed` (with the ISR and partition epoch the controller committed) or `refused`
        (with Kafka's error) by the answer to the item the leader queued at its time, else `pending`; None for an ISR
        its leader wrote itself, and for a controller's decision."""
        proposers = set(self._rows("SELECT cluster, broker FROM brokers WHERE queue IS NOT NULL"))
        return [
            self._proposal_outcome(d) if d.kind in _PROPOSED and (d.cluster, d.leader) in proposers else None
            for d in decisions
        ]

    def _proposal_outcome(self, d: Decision) -> dict[str, Any]:
        # One item per partition in a manager at a time (Kafka's putIfAbsent): the first answers after the decision
        # that carried the partition hold its own, submitted at the decision's time.
        rows = self._rows(
            "SELECT a.record FROM alter_partitions a JOIN alter_partition_items i ON i.batch_id = a.batch_id"
            " AND i.seq = a.seq WHERE a.cluster = ? AND a.broker = ? AND i.topic = ? AND i.partition = ?"
            " AND a.ts >= ? ORDER BY a.ts, a.batch_id, a.seq LIMIT 4",
            (d.cluster, d.leader, d.topic, d.partition, d.ts),
        )
        for (record,) in rows:
            for item in _decoders[AlterPartitionRequest](record).partitions:
                if (item.topic, item.partition, item.submitted_ms) == (d.topic, d.partition, d.ts):
                    return {
                        "state": "refused" if item.error else "committed",
                        "answered_ms": item.answered_ms,
                        "error": item.error,
                        "committed_isr": item.committed_isr,
                        "committed_partition_epoch": item.committed_partition_epoch,
                    }
        return {
            "state": "pending",
            "answered_ms": None,
            "error": None,
            "committed_isr": None,
            "committed_partition_epoch": None,
        }

    def propagations(
        self,
        *,
        cluster: str | None = None,
        topic: str | None = None,
        broker: int | None = None,
        trigger: str | None = None,
        since: int | None = None,
        after: Key | None = None,
        limit: int = 100,
    ) -> Page[Propagation]:
        """ISR-change batches newest first; `topic` matches a batch that carries any of its partitions."""
        where, params = _event_filters(
            ("d.cluster", cluster), ("d.broker", broker), ("d.trigger", trigger), since=since
        )
        if topic is not None:
            where.append(
                "EXISTS (SELECT 1 FROM propagation_partitions pp WHERE pp.batch_id = d.batch_id"
                " AND pp.seq = d.seq AND pp.topic = ?)"
            )
            params.append(topic)
        return self._newest_first(Propagation, "propagations", where, params, after, limit)

    def alter_partitions(
        self, *, since: int | None = None, after: Key | None = None, limit: int = 100, **equal: Any
    ) -> Page[AlterPartitionRequest]:
        """AlterPartition requests newest answer first, filtered by `cluster`, `broker` (the request's) and `topic`,
        `partition` (a partition it carried); None filters on nothing."""
        unknown = sorted(set(equal) - {"cluster", "broker", "topic", "partition"})
        if unknown:
            raise TypeError(f"alter_partitions has no filter {', '.join(unknown)}")
        cluster, broker, topic, partition = (equal.get(k) for k in ("cluster", "broker", "topic", "partition"))
        where, params = _event_filters(("d.cluster", cluster), ("d.broker", broker), since=since)
        if topic is not None or partition is not None:
            items, item_params = _equal(("i.topic", topic), ("i.partition", partition))
            where.append(
                "EXISTS (SELECT 1 FROM alter_partition_items i WHERE i.batch_id = d.batch_id AND i.seq = d.seq AND "
                + " AND ".join(items)
                + ")"
            )
            params.extend(item_params)
        return self._newest_first(AlterPartitionRequest, "alter_partitions", where, params, after, limit)

    def observed(self, **filters: Any) -> Page[dict[str, Any]]:
        """What brokers did (the agent's `isr_updated` and `isr_change_propagated`), newest first."""
        return self._audit_table("observed", **filters)

    def divergences(self, **filters: Any) -> Page[dict[str, Any]]:
        """Where the model and a broker disagreed, newest first."""
        return self._audit_table("divergences", **filters)

    def _audit_table(
        self, table: str, *, since: int | None = None, after: Key | None = None, limit: int = 100, **equal: Any
    ) -> Page[dict[str, Any]]:
        """A table of the live audit, newest first; `equal` filters on its columns (`AUDIT_COLUMNS`), None on none."""
        columns = AUDIT_COLUMNS[table]
        unknown = sorted(set(equal) - set(columns))
        if unknown:
            raise TypeError(f"{table} has no filter {', '.join(unknown)} (it has {', '.join(columns)})")
        where, params = _event_filters(*((f"d.{c}", equal.get(c)) for c in columns), since=since)
        return self._newest_first(dict, table, where, params, after, limit)

    def incidents(
        self,
        *,
        cluster: str | None = None,
        kind: str | None = None,
        broker: int | None = None,
        open: bool | None = None,
        since: int | None = None,
        after: Key | None = None,
        limit: int = 100,
    ) -> Page[dict[str, Any]]:
        """Incidents newest first by (opened_ms, id), without their partitions and decisions (`incident` has them);
        `since`: those not closed before it; `open`: closed_ms null (True) or not (False)."""
        where, params = _equal(("i.cluster", cluster), ("i.kind", kind))
        if broker is not None:
            where.append("i.brokers LIKE ?")
            params.append(f"%,{broker},%")
        if open is not None:
            where.append("i.closed_ms IS NULL" if open else "i.closed_ms IS NOT NULL")
        if since is not None:
            where.append("(i.closed_ms IS NULL OR i.closed_ms >= ?)")
            params.append(since)
        if after is not None:
            where.append("(i.opened_ms, i.id) < (?, ?)")
            params.extend(after)
        sql = "SELECT i.opened_ms, i.id, i.record FROM incidents i"
        if where:
            sql += " WHERE " + " AND ".join(where)
        rows = self._rows(sql + " ORDER BY i.opened_ms DESC, i.id DESC LIMIT ?", (*params, limit + 1))
        items = [_incident_summary(r[2]) for r in rows[:limit]]
        return Page(items, tuple(rows[limit - 1][:2]) if len(rows) > limit else None)

    def incident(self, incident_id: str) -> dict[str, Any] | None:
        """One incident with its partitions' intervals and its decisions (None: no such incident)."""
        row = self._one("SELECT record FROM incidents WHERE id = ?", (incident_id,))
        return None if row is None else _public(_decoders[dict](row[0]))

    def incidents_open(self) -> list[tuple[str, str, int, int]]:
        """(cluster, kind, open incidents, those with a partition under min ISR or offline), for /metrics."""
        return [
            (c, k, n, int(m or 0))
            for c, k, n, m in self._rows(
                "SELECT cluster, kind, COUNT(*), SUM(CASE WHEN worst IN ('under_min_isr', 'offline') THEN 1 ELSE 0 END)"
                " FROM incidents WHERE closed_ms IS NULL GROUP BY cluster, kind ORDER BY cluster, kind"
            )
        ]

    def timeline(self, cluster: str, since: int, until: int, markers: int = 10_000) -> dict[str, Any]:
        """The timeline of `cluster` between `since` and `until` (event time, inclusive): its partition counts (the
        one in force at `since` first), each broker's intervals that overlap it, at most `markers` markers, and the
        incidents that overlap it."""
        counts = self._rows(
            "SELECT ts, under_replicated, under_min_isr, offline FROM timeline_counts WHERE cluster = ? AND ts < ?"
            " ORDER BY ts DESC LIMIT 1",
            (cluster, since),
        )
        counts = [(since, *r[1:]) for r in counts] + self._rows(
            "SELECT ts, under_replicated, under_min_isr, offline FROM timeline_counts"
            " WHERE cluster = ? AND ts >= ? AND ts <= ? ORDER BY ts",
            (cluster, since, until),
        )
        lanes: dict[int, list[dict[str, Any]]] = {}
        for broker, kind, start, end, partitions in self._rows(
            "SELECT broker, kind, start_ms, end_ms, partitions FROM timeline_intervals"
            " WHERE cluster = ? AND start_ms <= ? AND (end_ms IS NULL OR end_ms >= ?) ORDER BY broker, start_ms, kind",
            (cluster, until, since),
        ):
            lanes.setdefault(broker, []).append(
                {"kind": kind, "start_ms": start, "end_ms": end, "partitions": partitions}
            )
        marks = self._rows(
            "SELECT ts, kind, broker, topic, partition, text FROM timeline_markers"
            " WHERE cluster = ? AND ts >= ? AND ts <= ? ORDER BY ts, batch_id, seq LIMIT ?",
            (cluster, since, until, markers),
        )
        incidents = self._rows(
            "SELECT record FROM incidents WHERE cluster = ? AND opened_ms <= ?"
            " AND (closed_ms IS NULL OR closed_ms >= ?) ORDER BY opened_ms, id",
            (cluster, until, since),
        )
        names = ("ts", "kind", "broker", "topic", "partition", "text")
        return {
            "cluster": cluster,
            "since": since,
            "until": until,
            "counts": [
                dict(zip(("ts", "under_replicated", "under_min_isr", "offline"), r, strict=True)) for r in counts
            ],
            "brokers": [{"broker": b, "intervals": lanes[b]} for b in sorted(lanes)],
            "markers": [dict(zip(names, m, strict=True)) for m in marks],
            "incidents": [_incident_summary(r[0]) for r in incidents],
        }

    def timeline_clusters(self) -> list[str]:
        """The clusters the store has incidents or timeline counts of."""
        return [
            r[0]
            for r in self._rows("SELECT cluster FROM timeline_counts UNION SELECT cluster FROM incidents ORDER BY 1")
        ]

    def dead_letters(
        self, *, since: int | None = None, after: Key | None = None, limit: int = 100
    ) -> Page[dict[str, Any]]:
        """Dead letters newest batch first (a dead letter's ts may be unknown, so the order is arrival)."""
        where, params = _event_filters(since=since)
        if after is not None:
            where.append("(d.batch_id, d.seq) < (?, ?)")
            params.extend(after)
        sql = "SELECT d.batch_id, d.seq, d.raw, d.reason, d.field, d.ts FROM dead_letters d"
        if where:
            sql += " WHERE " + " AND ".join(where)
        rows = self._rows(sql + " ORDER BY d.batch_id DESC, d.seq DESC LIMIT ?", (*params, limit + 1))
        items = [
            {"raw": bytes(r[2]).decode("utf-8", "surrogatepass"), "reason": r[3], "field": r[4], "ts": r[5]}
            for r in rows[:limit]
        ]
        return Page(items, tuple(rows[limit - 1][:2]) if len(rows) > limit else None)

    def _newest_first(
        self, kind: type[T], table: str, where: list[str], params: list[Any], after: Key | None, limit: int
    ) -> Page[T]:
        if after is not None:
            where.append("(d.ts, d.batch_id, d.seq) < (?, ?, ?)")
            params.extend(after)
        sql = f"SELECT d.ts, d.batch_id, d.seq, d.record FROM {table} d"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY d.ts DESC, d.batch_id DESC, d.seq DESC LIMIT ?"
        rows = self._rows(sql, (*params, limit + 1))
        decode = _decoders[kind]
        items = [decode(r[3]) for r in rows[:limit]]
        return Page(items, tuple(rows[limit - 1][:3]) if len(rows) > limit else None)

    def brokers(self, cluster: str | None = None, broker: int | None = None) -> list[dict[str, Any]]:
        """Every broker that hosts a replica or has propagation state, with its replica counts."""
        cond, params = _broker_filter(cluster, broker)
        out: dict[tuple[str, int], dict[str, Any]] = {}
        for c, b, led, hosted, out_of_sync in self._rows(
            "SELECT cluster, broker, SUM(is_leader), COUNT(*), SUM(1 - in_sync) FROM replicas"
            + cond
            + " GROUP BY broker, cluster",
            params,
        ):
            out[(c, b)] = _broker(c, b, partitions_led=int(led), replicas=int(hosted), out_of_sync=int(out_of_sync))
        for state in self.broker_propagation(cluster, broker):
            key = (state["cluster"], state["broker"])
            out.setdefault(key, _broker(*key)).update(state)
        return [out[k] for k in sorted(out)]

    def broker_propagation(self, cluster: str | None = None, broker: int | None = None) -> list[dict[str, Any]]:
        """Each broker's pending ISR-change set and last propagation and, when it proposes with AlterPartition, its
        `queue` and `in_flight` request, and when it reports its own events its `clock_offset_ms`, without touching
        the replica rows.

        `last_propagation_ms` is its last ISR-change batch in the history (None: it never sent one, as a leader that
        proposes with AlterPartition never does); `last_isr_change_ms` of a broker that proposes with AlterPartition
        is its last commit (None: none yet): the propagation throttle's own clocks start at the schedule's origin and
        mean nothing to a reader.
        """
        cond, params = _broker_filter(cluster, broker)
        out: dict[tuple[str, int], dict[str, Any]] = {}
        for c, b, pending, first, last_change, last_prop, queue, in_flight, offset in self._rows(
            "SELECT cluster, broker, pending, first_change_ts, last_isr_change_ms, last_propagation_ms, queue,"
            " in_flight, clock_offset_ms FROM brokers" + cond,
            params,
        ):
            out[(c, b)] = _propagation_state(c, b, _decode(pending), first, last_change, last_prop)
            if offset is not None:  # a broker that reports its own events: its clock (SPEC §6, clock offsets)
                out[(c, b)]["clock_offset_ms"] = offset
            if queue is not None:  # a broker that proposes with AlterPartition: its manager
                out[(c, b)].update(queue=_decode(queue), in_flight=None if in_flight is None else _decode(in_flight))
        for state in out.values():
            state["last_propagation_ms"] = None
            if "queue" in state:
                state["last_isr_change_ms"] = None
        for c, b, last_prop in self._rows(
            "SELECT cluster, broker, MAX(ts) FROM propagations" + cond + " GROUP BY broker, cluster", params
        ):
            out.setdefault((c, b), _propagation_state(c, b))["last_propagation_ms"] = last_prop
        committed = (
            "SELECT a.cluster, a.broker, MAX(a.ts) FROM alter_partitions a WHERE EXISTS (SELECT 1 FROM"
            " alter_partition_items i WHERE i.batch_id = a.batch_id AND i.seq = a.seq AND i.outcome = 'committed')"
        )
        for c, b, last_commit in self._rows(
            committed + cond.replace(" WHERE ", " AND ") + " GROUP BY a.broker, a.cluster", params
        ):
            if "queue" in out.get((c, b), {}):
                out[(c, b)]["last_isr_change_ms"] = last_commit
        return [out[k] for k in sorted(out)]

    def out_of_sync_replicas(self, cluster: str, broker: int, limit: int = 100) -> list[dict[str, Any]]:
        """Replicas this broker hosts that are not in their partition's ISR, as the leader last saw them."""
        rows = self._rows(
            "SELECT topic, partition, leo, lag_offsets, last_caught_up_ms FROM replicas"
            " WHERE cluster = ? AND broker = ? AND in_sync = 0 ORDER BY topic, partition LIMIT ?",
            (cluster, broker, limit),
        )
        return [
            {"topic": t, "partition": p, "leo": leo, "lag_offsets": lag, "last_caught_up_ms": lcu}
            for t, p, leo, lag, lcu in rows
        ]

    # -- reads for /metrics

    def partition_counts(self) -> list[tuple[int | str, ...]]:
        """Per cluster: (cluster, total, then the count of each of `PARTITION_FLAGS` in order)."""
        sums = ", ".join(f"SUM({flag})" for flag in PARTITION_FLAGS)
        return [
            (c, *map(int, rest))
            for c, *rest in self._rows(
                f"SELECT cluster, COUNT(*), {sums} FROM partitions GROUP BY cluster ORDER BY cluster"
            )
        ]

    def pending_by_leader(self) -> list[tuple[str, int, int, int | None]]:
        """Per leader broker with uncommitted ISR changes: (cluster, broker, pending partitions, oldest
        pending_since_ms)."""
        return [
            (c, int(b), int(n), oldest)
            for c, b, n, oldest in self._rows(
                "SELECT cluster, leader, COUNT(*), MIN(pending_since_ms) FROM partitions WHERE isr_pending = 1"
                " AND leader IS NOT NULL GROUP BY cluster, leader ORDER BY cluster, leader"
            )
        ]

    def alter_partition_managers(self) -> list[tuple[str, int, int, int | None]]:
        """Per broker that proposes with AlterPartition: (cluster, broker, queued proposals, in-flight send time)."""
        return [
            (c, b, len(_decode(queue)), sent)
            for c, b, queue, sent in self._rows(
                "SELECT cluster, broker, queue, in_flight_sent_ms FROM brokers WHERE queue IS NOT NULL"
                " ORDER BY cluster, broker"
            )
        ]

    def followers_predicted_to_shrink(self, now: EventTime, window_ms: int | None = None) -> dict[str, int]:
        condition, bounds = _shrink_predicted(now, window_ms)
        if condition is None:
            return {}
        return dict(self._rows(f"SELECT cluster, COUNT(*) FROM replicas WHERE {condition} GROUP BY cluster", bounds))

    def followers(self, *, order: str, limit: int | None = None, topics: Sequence[str] = ()) -> list[tuple[Any, ...]]:
        """Follower rows (cluster, topic, partition, replica, last_caught_up_ms, lag_offsets, behind_in_isr).

        `order="caught_up"`: ISR followers behind the leader, longest since caught up first;
        `order="lag"`: followers behind the leader, the largest lag in offsets first;
        `order="topic"`: every follower of `topics` (the per-partition allow-list).
        """
        select = (
            "SELECT cluster, topic, partition, broker, last_caught_up_ms, lag_offsets,"
            " shrink_eligible_at_ms IS NOT NULL FROM replicas"
        )
        if order == "caught_up":
            rows = self._rows(
                select + " WHERE shrink_eligible_at_ms IS NOT NULL ORDER BY last_caught_up_ms,"
                " cluster, topic, partition, broker LIMIT ?",
                (limit,),
            )
        elif order == "lag":
            rows = self._rows(
                select + " WHERE lag_offsets > 0 ORDER BY lag_offsets DESC, cluster, topic, partition, broker LIMIT ?",
                (limit,),
            )
        elif order == "topic":
            if not topics:
                return []
            rows = self._rows(
                select + f" WHERE is_leader = 0 AND topic IN ({', '.join('?' * len(topics))})"
                " ORDER BY cluster, topic, partition, broker",
                tuple(topics),
            )
        else:
            raise ValueError(f"unknown follower order {order!r}")
        return [(*r[:6], bool(r[6])) for r in rows]

    def topic_partitions(self, topics: Sequence[str]) -> list[PartitionRecord]:
        """Full records of every partition of `topics` (the per-partition metrics allow-list)."""
        if not topics:
            return []
        return [
            _partition(r[0])
            for r in self._rows(
                f"SELECT record FROM partitions WHERE topic IN ({', '.join('?' * len(topics))})"
                " ORDER BY cluster, topic, partition",
                tuple(topics),
            )
        ]

    def tallies(self) -> list[tuple[str, dict[str, str], float]]:
        return [
            (m, json.loads(labels), float(v))
            for m, labels, v in self._rows("SELECT metric, labels, value FROM tallies ORDER BY metric, labels")
        ]

    def lost_records(self) -> list[tuple[str, int, int]]:
        """(topic, partition, records) the stream's Kafka source never read, by partition (SPEC §6)."""
        rows = self._rows("SELECT labels, value FROM tallies WHERE metric = ?", (SOURCE_LOST_RECORDS.tally,))
        labelled = [(json.loads(labels), value) for labels, value in rows]
        return sorted((labels["topic"], int(labels["partition"]), int(value)) for labels, value in labelled)

    def latest_progress(self) -> dict[str, Any] | None:
        row = self._one(f"SELECT {', '.join(PROGRESS_FIELDS)} FROM progress ORDER BY batch_id DESC LIMIT 1")
        return None if row is None else dict(zip(PROGRESS_FIELDS, row, strict=True))


def _propagation_state(
    cluster: str,
    broker: int,
    pending: list[Any] | None = None,
    first_change_ts: int | None = None,
    last_isr_change_ms: int | None = None,
    last_propagation_ms: int | None = None,
) -> dict[str, Any]:
    return {
        "cluster": cluster,
        "broker": broker,
        "pending": pending or [],
        "first_change_ts": first_change_ts,
        "last_isr_change_ms": last_isr_change_ms,
        "last_propagation_ms": last_propagation_ms,
    }


def _broker(
    cluster: str, broker: int, partitions_led: int = 0, replicas: int = 0, out_of_sync: int = 0
) -> dict[str, Any]:
    return {
        **_propagation_state(cluster, broker),
        "partitions_led": partitions_led,
        "replicas": replicas,
        "out_of_sync_replicas": out_of_sync,
    }


def _shrink_predicted(now: EventTime, window_ms: int | None) -> tuple[str | None, list[Any]]:
    """The replicas condition for "past or near the lag limit", each cluster judged at its own now, and its
    parameters (None: no now yet). The explicit IS NOT NULL lets SQLite see that the partial index applies."""
    column, shift = ("shrink_warning_at_ms", 0) if window_ms is None else ("shrink_eligible_at_ms", window_ms)
    terms, params = [], []
    for cluster, at in sorted(now.clusters.items()):
        terms.append(f"(cluster = ? AND {column} <= ?)")
        params += [cluster, at + shift]
    if now.latest is not None:
        named = ", ".join("?" * len(now.clusters))
        terms.append(f"({column} <= ?" + (f" AND cluster NOT IN ({named}))" if named else ")"))
        params += [now.latest + shift, *sorted(now.clusters)]
    if not terms:
        return None, []
    return f"{column} IS NOT NULL AND ({' OR '.join(terms)})", params


class _Elr(msgspec.Struct):
    """The one field of a partition record the ISR query reads (msgspec skips the others)."""

    elr: list[int] | None = None


_elr_of = msgspec.json.Decoder(_Elr).decode


def _public(incident: dict[str, Any]) -> dict[str, Any]:
    """An incident's row as its record: without the fields only the incident book reads."""
    return {k: v for k, v in incident.items() if k not in INTERNAL_FIELDS}


def _incident_summary(record: str) -> dict[str, Any]:
    """An incident as a list shows it: without its partitions and decisions."""
    return {k: v for k, v in _public(_decoders[dict](record)).items() if k not in ("partitions", "decisions")}


def _one_partition(columns: str, topic: str, partition: int, cluster: str | None) -> tuple[str, tuple[Any, ...]]:
    sql = f"SELECT cluster, {columns} FROM partitions WHERE topic = ? AND partition = ?"
    if cluster is None:
        return sql + " ORDER BY cluster", (topic, partition)
    return sql + " AND cluster = ?", (topic, partition, cluster)


def _equal(*pairs: tuple[str, Any]) -> tuple[list[str], list[Any]]:
    """`column = ?` conditions and their parameters for the pairs whose value is given (an enum by its value:
    drivers would otherwise pick their own representation)."""
    given = [(column, value) for column, value in pairs if value is not None]
    return [f"{column} = ?" for column, _ in given], [str(v) if isinstance(v, StrEnum) else v for _, v in given]


def _broker_filter(cluster: str | None, broker: int | None) -> tuple[str, list[Any]]:
    where, params = _equal(("cluster", cluster), ("broker", broker))
    return (" WHERE " + " AND ".join(where)) if where else "", params


def _event_filters(*pairs: tuple[str, Any], since: int | None) -> tuple[list[str], list[Any]]:
    where, params = _equal(*pairs)
    if since is not None:
        where.append("d.ts >= ?")
        params.append(since)
    return where, params
