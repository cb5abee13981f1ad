"""Every metric isrwatch exports, declared once as plain data: name, help, labels, buckets, and the store tally
behind each counter and histogram.

The store counts tallies at write time under these names; `api/metrics.py` builds the Prometheus families
from this catalogue; a test checks docs/CONTRACTS.md against it, and the dashboards and alert rules
against the names a real server exports.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from .records import AlterPartitionRequest, Decision, DecisionKind, Divergence, IsrCommitted, Propagation


class Kind(StrEnum):
    GAUGE = "gauge"
    COUNTER = "counter"
    HISTOGRAM = "histogram"


@dataclass(frozen=True)
class Metric:
    """One exported metric family. `name` is the exposed name (a counter's without `_total`); `tally` is the
    store's name for the cumulative count a counter or histogram is read from."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    tally: str = ""  # "" for a gauge, read from the store's current state instead
    buckets: tuple[float, ...] = ()

    @property
    def exposed(self) -> str:
        """The name a scrape shows (counters get `_total`)."""
        return self.name + "_total" if self.kind is Kind.COUNTER else self.name


def gauge(name: str, help: str, labels: tuple[str, ...] = ()) -> Metric:
    """A gauge read from the store's current state, exposed as `isrwatch_<name>`."""
    return Metric(f"isrwatch_{name}", Kind.GAUGE, help, labels)


def counter(tally: str, help: str, labels: tuple[str, ...] = ()) -> Metric:
    """A counter the store tallies under `tally`; it is exposed as `isrwatch_<tally>_total`."""
    return Metric(f"isrwatch_{tally}", Kind.COUNTER, help, labels, tally=tally)


def histogram(
    tally: str, name: str, help: str, buckets: tuple[float, ...], labels: tuple[str, ...] = ("cluster",)
) -> Metric:
    """A histogram per cluster (and `labels`) the store tallies per bucket under `tally`; exposed as
    `isrwatch_<name>`."""
    return Metric(f"isrwatch_{name}", Kind.HISTOGRAM, help, labels, tally=tally, buckets=buckets)


_FOLLOWER = ("cluster", "topic", "partition", "replica")
_PARTITION = ("cluster", "topic", "partition")
_BROKER = ("cluster", "broker")

# Partitions
PARTITIONS = gauge("partitions", "Partitions by state (total = all known)", ("cluster", "state"))
# The flag columns, in store order (isr_pending: an ISR change proposed and not committed, SPEC §4.9).
PARTITION_FLAGS = ("under_replicated", "under_min_isr", "at_min_isr", "offline", "isr_pending")
PARTITIONS_BY_FLAG = {
    flag: gauge(f"{flag}_partitions", f"Partitions {flag.replace('_', ' ')}", ("cluster",)) for flag in PARTITION_FLAGS
}
FOLLOWERS_PREDICTED_TO_SHRINK = gauge(
    "followers_predicted_to_shrink", "ISR followers past or near their lag limit", ("cluster",)
)
PARTITION_IN_SYNC_REPLICAS = gauge("partition_in_sync_replicas", "ISR size (allow-listed topics)", _PARTITION)
PARTITION_REPLICAS = gauge("partition_replicas", "Assigned replicas (allow-listed topics)", _PARTITION)
PARTITION_UNDER_REPLICATED = gauge(
    "partition_under_replicated", "1 when under-replicated (allow-listed topics)", _PARTITION
)
# Followers (top N, plus every follower of allow-listed topics)
FOLLOWER_TIME_SINCE_CAUGHT_UP = gauge(
    "follower_time_since_caught_up_seconds",
    "Event time since an ISR follower behind the leader last caught up (top N)",
    _FOLLOWER,
)
FOLLOWER_LAG_OFFSETS = gauge("follower_lag_offsets", "Leader LEO minus follower LEO (top N)", _FOLLOWER)
# Brokers
BROKER_PENDING_ISR_CHANGES = gauge(
    "broker_pending_isr_changes", "Partitions in a leader broker's ISR-change set not yet propagated", _BROKER
)
BROKER_SECONDS_SINCE_LAST_PROPAGATION = gauge(
    "broker_seconds_since_last_propagation", "Event time since a broker's last ISR-change batch", _BROKER
)
BROKER_OUT_OF_SYNC_REPLICAS = gauge(
    "broker_out_of_sync_replicas",
    "Replicas a broker hosts that are out of their partition's ISR: the broker's view as a follower",
    _BROKER,
)
BROKER_CLOCK_OFFSET = gauge(
    "broker_clock_offset_seconds",
    "A reporting broker's clock minus its cluster's median clock (SPEC §6; absent: the broker reports no events)",
    _BROKER,
)
# Brokers' AlterPartition path (SPEC §4.9): what each leader has pending, queued and in flight
BROKER_ISR_PENDING_PARTITIONS = gauge(
    "broker_isr_pending_partitions", "Partitions a leader broker leads whose ISR change is not committed yet", _BROKER
)
BROKER_OLDEST_ISR_PENDING = gauge(
    "broker_oldest_isr_pending_seconds",
    "Event time since the oldest uncommitted ISR change of a partition the broker leads was decided",
    _BROKER,
)
BROKER_ALTER_PARTITION_QUEUE = gauge(
    "broker_alter_partition_queue_size", "Proposals in a broker's AlterPartition queue, not yet sent", _BROKER
)
BROKER_ALTER_PARTITION_IN_FLIGHT_AGE = gauge(
    "broker_alter_partition_in_flight_age_seconds",
    "Event time since a broker sent its AlterPartition request still in flight (absent: none in flight)",
    _BROKER,
)
# Incidents (SPEC §8)
INCIDENTS_OPEN = gauge("incidents_open", "Incidents open, by kind (SPEC §8)", ("cluster", "kind"))
INCIDENTS_OPEN_UNDER_MIN_ISR = gauge(
    "incidents_open_under_min_isr",
    "Open incidents with a partition that went under min ISR or offline (producers with acks=all get "
    "NOT_ENOUGH_REPLICAS)",
    ("cluster", "kind"),
)
# Counters, tallied by the store at write time
ISR_SHRINKS = counter(
    "isr_shrinks", "Followers removed from an ISR, by the leader that removed them", ("cluster", "broker", "reason")
)
FOLLOWER_SHRINKS = counter(
    "follower_shrinks",
    "Followers removed from an ISR, by the removed replica's broker (the follower's view) and the reason",
    ("cluster", "broker", "reason"),
)
ISR_EXPANDS = counter("isr_expands", "Followers added back to an ISR, by leader", ("cluster", "broker"))
DECISIONS = counter(
    "decisions", "Decisions made, by kind (with AlterPartition a shrink or expand is a proposal)", ("cluster", "kind")
)
PROPAGATION_BATCHES = counter(
    "propagation_batches", "ISR-change batches sent, by leader broker and trigger", ("cluster", "broker", "trigger")
)
DEAD_LETTERS = counter("dead_letters", "Inputs rejected to the dead letter, by reason", ("reason",))
IGNORED_FETCHES = counter("ignored_fetches", "Fetches ignored without a state change, by reason", ("reason",))
IGNORED_APPENDS = counter("ignored_appends", "Appends ignored without a state change, by reason", ("reason",))
IGNORED_LEADER_AND_ISR = counter(
    "ignored_leader_and_isr",
    "LeaderAndIsr states reported by a broker and not applied: another replica's copy or a repeat",
    ("reason",),
)
IGNORED_TICKS = counter(
    "ignored_ticks", "Ticks whose kafka_version was not taken (the tick still ran), by reason", ("reason",)
)
DIVERGENCES = counter(
    "divergences",
    "Where the model and a broker disagreed (agent input), by kind; a `timing` one by the rule that excused it "
    "(cause, SPEC §7; empty for other kinds)",
    ("cluster", "kind", "cause"),
)
ALTER_PARTITION_REQUESTS = counter(
    "alter_partition_requests",
    "AlterPartition proposals answered, one per partition of a request, by outcome (committed or Kafka's error)",
    ("cluster", "broker", "outcome"),
)
FAILED_ISR_UPDATES = counter(
    "failed_isr_updates", "ISR proposals that failed, by Kafka's error (Kafka's FailedIsrUpdatesPerSec)", ("reason",)
)
IGNORED_ALTER_PARTITION_RESPONSES = counter(
    "ignored_alter_partition_responses", "AlterPartition responses no proposal of the partition awaited", ("reason",)
)
IGNORED_ALTER_PARTITION_ANSWERS = counter(
    "ignored_alter_partition_answers", "Answers no AlterPartition request of the broker awaited", ("reason",)
)
INCIDENTS = counter("incidents", "Incidents opened, by kind (SPEC §8)", ("cluster", "kind"))
LATE_EVENTS = counter("late_events", "Events at or behind the watermark, counted and dropped")
STREAM_INPUT_ROWS = counter("stream_input_rows", "Input rows the streaming query read")
SOURCE_LOST_RECORDS = counter(
    "source_lost_records",
    "Kafka records the stream never read: deleted (retention, deleteRecords) between being planned into a "
    "micro-batch's offset range and being fetched",
    ("topic", "partition"),
)
# Histograms, tallied per bucket by the store
PROPAGATION_BATCH_SIZE = histogram(
    "propagation_batch_size",
    "propagation_batch_size_partitions",
    "Partitions per ISR-change batch",
    (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000),
)
PROPAGATION_DELAY = histogram(
    "propagation_delay",
    "propagation_delay_seconds",
    "Event time from the first ISR change of a batch to the batch",
    (1, 2.5, 5, 6, 7.5, 10, 15, 30, 60, 62.5, 70, 90, 120),
)
ALTER_PARTITION_LATENCY = histogram(
    "alter_partition_latency",
    "alter_partition_latency_seconds",
    "Event time from an AlterPartition request's send to the answer of its last partition",
    (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
TIMING_MARGIN = histogram(
    "timing_margin",
    "timing_divergence_margin_seconds",
    "How far a timing divergence's margin reached (its size: SPEC §7, each rule's own), by the rule that excused it",
    (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 60),
    ("cluster", "cause"),
)
# Stream health, from the last micro-batch
STREAM_BATCH_DURATION = gauge("stream_batch_duration_seconds", "Duration of the last micro-batch")
STREAM_INPUT_ROWS_PER_SECOND = gauge("stream_input_rows_per_second", "Input rate of the last micro-batch")
STREAM_STATE_ROWS = gauge("stream_state_rows", "Rows in the streaming state store")
STREAM_LAST_BATCH_AGE = gauge("stream_last_batch_age_seconds", "Wall-clock time since the last batch committed")
STREAM_WATERMARK = gauge("stream_watermark_seconds", "The settled watermark (event time, epoch seconds)")
STREAM_CLUSTER_EVENT_TIME = gauge(
    "stream_cluster_event_time_seconds",
    "How far the stream has settled each cluster (its event time, epoch seconds): a lagging source shows here",
    ("cluster",),
)
STREAM_WATERMARK_LAG = gauge("stream_watermark_lag_seconds", "Wall clock minus the settled watermark")

CATALOGUE: tuple[Metric, ...] = (
    PARTITIONS,
    *PARTITIONS_BY_FLAG.values(),
    FOLLOWERS_PREDICTED_TO_SHRINK,
    PARTITION_IN_SYNC_REPLICAS,
    PARTITION_REPLICAS,
    PARTITION_UNDER_REPLICATED,
    FOLLOWER_TIME_SINCE_CAUGHT_UP,
    FOLLOWER_LAG_OFFSETS,
    BROKER_PENDING_ISR_CHANGES,
    BROKER_SECONDS_SINCE_LAST_PROPAGATION,
    BROKER_OUT_OF_SYNC_REPLICAS,
    BROKER_CLOCK_OFFSET,
    BROKER_ISR_PENDING_PARTITIONS,
    BROKER_OLDEST_ISR_PENDING,
    BROKER_ALTER_PARTITION_QUEUE,
    BROKER_ALTER_PARTITION_IN_FLIGHT_AGE,
    INCIDENTS_OPEN,
    INCIDENTS_OPEN_UNDER_MIN_ISR,
    ISR_SHRINKS,
    FOLLOWER_SHRINKS,
    ISR_EXPANDS,
    DECISIONS,
    PROPAGATION_BATCHES,
    DEAD_LETTERS,
    IGNORED_FETCHES,
    IGNORED_APPENDS,
    IGNORED_LEADER_AND_ISR,
    IGNORED_TICKS,
    DIVERGENCES,
    ALTER_PARTITION_REQUESTS,
    FAILED_ISR_UPDATES,
    IGNORED_ALTER_PARTITION_RESPONSES,
    IGNORED_ALTER_PARTITION_ANSWERS,
    INCIDENTS,
    LATE_EVENTS,
    STREAM_INPUT_ROWS,
    SOURCE_LOST_RECORDS,
    PROPAGATION_BATCH_SIZE,
    PROPAGATION_DELAY,
    ALTER_PARTITION_LATENCY,
    TIMING_MARGIN,
    STREAM_BATCH_DURATION,
    STREAM_INPUT_ROWS_PER_SECOND,
    STREAM_STATE_ROWS,
    STREAM_LAST_BATCH_AGE,
    STREAM_WATERMARK,
    STREAM_WATERMARK_LAG,
    STREAM_CLUSTER_EVENT_TIME,
)
TALLIED = {m.tally: m for m in CATALOGUE if m.tally}

Labels = tuple[tuple[str, str], ...]  # (label, value) pairs sorted by label
TallyKey = tuple[str, Labels]  # (tally name, labels); histograms: "<tally>_bucket" (with `le`), "_sum", "_count"


def counter_key(kind: Metric, reason: str) -> str:
    """The name a step counts `kind` under for `reason` (`ignored_fetches.not_follower`); `tallies` splits it into
    the tally and its `reason` label."""
    return f"{kind.tally}.{reason}"


def bucket_label(value: float, bounds: Sequence[float]) -> str:
    """The `le` label of the smallest bucket holding `value`."""
    i = bisect.bisect_left(bounds, value)
    return f"{bounds[i]:g}" if i < len(bounds) else "+Inf"


def tallies(
    decisions: Iterable[Decision],
    propagations: Iterable[Propagation],
    counters: Mapping[str, int],
    divergences: Iterable[Divergence] = (),
    alter_partitions: Iterable[AlterPartitionRequest] = (),
    incidents_opened: Iterable[tuple[str, str]] = (),
    committed: Iterable[IsrCommitted] = (),
) -> dict[TallyKey, float]:
    """The cumulative-counter increments one batch contributes.

    Counted once at write time, so /metrics never scans the decision history: shrinks per removed follower by
    its reason (under its leader's broker and under its own) and expands, each when its ISR committed (`committed`:
    a refused proposal is none), decisions by kind, batches by trigger, the
    batch-size and change-to-batch delay histograms, divergences by kind and cause with the timing margins'
    histogram by cause, AlterPartition answers by outcome and the request latency histogram, incidents opened by
    (cluster, kind), plus the step's `name[.reason]` counters.
    """
    counts: dict[TallyKey, float] = defaultdict(float)

    def add(tally: str, value: float = 1, /, **labels: object) -> None:
        counts[(tally, tuple(sorted((k, str(v)) for k, v in labels.items())))] += value

    # Counted by their labels first: a batch that settles every partition carries one decision each.
    for (cluster, decided), n in Counter((d.cluster, d.kind) for d in decisions).items():
        add(DECISIONS.tally, n, cluster=cluster, kind=decided)
    for c, n in Counter(committed).items():
        if c.kind is DecisionKind.SHRINK:
            add(ISR_SHRINKS.tally, n, broker=c.leader, cluster=c.cluster, reason=c.reason)
            add(FOLLOWER_SHRINKS.tally, n, broker=c.replica, cluster=c.cluster, reason=c.reason)
        else:
            add(ISR_EXPANDS.tally, n, broker=c.leader, cluster=c.cluster)
    samples: list[tuple[Metric, dict[str, str], float]] = []  # (histogram, its labels but `le`, value)
    for p in propagations:
        add(PROPAGATION_BATCHES.tally, broker=p.broker, cluster=p.cluster, trigger=p.trigger)
        samples.append((PROPAGATION_BATCH_SIZE, {"cluster": p.cluster}, len(p.partitions)))
        if p.first_change_ts is not None:
            samples.append((PROPAGATION_DELAY, {"cluster": p.cluster}, (p.ts - p.first_change_ts) / 1000))
    for r in alter_partitions:
        for item in r.partitions:
            add(ALTER_PARTITION_REQUESTS.tally, broker=r.broker, cluster=r.cluster, outcome=item.error or "committed")
        if r.response_ms is not None:
            samples.append((ALTER_PARTITION_LATENCY, {"cluster": r.cluster}, (r.response_ms - r.sent_ms) / 1000))
    for cluster, kind in incidents_opened:
        add(INCIDENTS.tally, cluster=cluster, kind=kind)
    for divergence in divergences:
        add(DIVERGENCES.tally, cluster=divergence.cluster, kind=divergence.kind, cause=divergence.cause or "")
        if divergence.cause is not None and divergence.margin_ms is not None:
            labels = {"cluster": divergence.cluster, "cause": str(divergence.cause)}
            # its size: a histogram with negative buckets has no _sum or _count (OpenMetrics), and each rule's
            # margin has one sign but `margin` and `fetch_order`, whose bound is the same either way
            samples.append((TIMING_MARGIN, labels, abs(divergence.margin_ms) / 1000))
    for histogram, labels, value in samples:
        add(f"{histogram.tally}_bucket", le=bucket_label(value, histogram.buckets), **labels)
        add(f"{histogram.tally}_sum", value, **labels)
        add(f"{histogram.tally}_count", **labels)
    for name, value in counters.items():
        tally, _, why = name.partition(".")
        if why:
            add(tally, value, reason=why)
        else:
            add(tally, value)
    return dict(counts)
