"""/metrics: a custom collector that reads the store at scrape time (names fixed in docs/CONTRACTS.md).

Nothing is counted in this process: the job's cumulative counts live in the store's tallies, so
any number of API processes report the same values and restarts lose nothing. Cardinality stays
bounded: per-cluster and per-broker series, the top-N followers, and per-partition series only for
the topics on the allow-list. One uvicorn worker per process (prometheus-client's multiprocess
mode does not run custom collectors).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from state.store import PROPAGATION_BATCH_SIZE_BUCKETS, PROPAGATION_DELAY_BUCKETS, Store, StreamPosition

from .settings import Settings

_FOLLOWER_LABELS = ["cluster", "topic", "partition", "replica"]
_PARTITION_LABELS = ["cluster", "topic", "partition"]
_STATES = ("under_replicated", "under_min_isr", "at_min_isr", "offline")

# Stored tally metric -> (exposed counter name without _total, help, label names).
_COUNTERS = {
    "isr_shrinks": ("isrwatch_isr_shrinks", "Followers removed from an ISR, by the leader that removed them",
                    ["cluster", "broker", "reason"]),
    "isr_expands": ("isrwatch_isr_expands", "Followers added back to an ISR, by leader", ["cluster", "broker"]),
    "decisions": ("isrwatch_decisions", "Decisions made, by kind", ["cluster", "kind"]),
    "propagation_batches": ("isrwatch_propagation_batches", "ISR-change batches sent, by leader broker and trigger",
                            ["cluster", "broker", "trigger"]),
    "dead_letters": ("isrwatch_dead_letters", "Inputs rejected to the dead letter, by reason", ["reason"]),
    "ignored_fetches": ("isrwatch_ignored_fetches", "Fetches ignored without a state change, by reason", ["reason"]),
    "ignored_appends": ("isrwatch_ignored_appends", "Appends ignored without a state change, by reason", ["reason"]),
    "late_events": ("isrwatch_late_events", "Events at or behind the watermark, counted and dropped", []),
    "stream_input_rows": ("isrwatch_stream_input_rows", "Input rows the streaming query read", []),
}
_HISTOGRAMS = {
    "propagation_batch_size": ("isrwatch_propagation_batch_size_partitions", "Partitions per ISR-change batch",
                               PROPAGATION_BATCH_SIZE_BUCKETS),
    "propagation_delay": ("isrwatch_propagation_delay_seconds",
                          "Event time from the first ISR change of a batch to the batch", PROPAGATION_DELAY_BUCKETS),
}


class StoreCollector(Collector):
    """Builds every isrwatch_ metric family from the store on each scrape."""

    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings

    def collect(self) -> Iterator[Metric]:
        store = self.store
        position = store.stream_position()
        now_ms = None if position is None else position.watermark_ms
        yield from self._partitions(now_ms)
        yield from self._followers(now_ms)
        yield from self._brokers(now_ms)
        yield from self._tallies()
        yield from self._stream(position)

    def _partitions(self, now_ms: int | None) -> Iterator[Metric]:
        by_state = GaugeMetricFamily("isrwatch_partitions", "Partitions by state (total = all known)",
                                     labels=["cluster", "state"])
        singles = {state: GaugeMetricFamily(f"isrwatch_{state}_partitions", f"Partitions {state.replace('_', ' ')}",
                                            labels=["cluster"]) for state in _STATES}
        for cluster, total, *counts in self.store.partition_counts():
            by_state.add_metric([cluster, "total"], total)
            for state, count in zip(_STATES, counts, strict=True):
                by_state.add_metric([cluster, state], count)
                singles[state].add_metric([cluster], count)
        yield by_state
        yield from singles.values()
        predicted = GaugeMetricFamily("isrwatch_followers_predicted_to_shrink",
                                      "ISR followers past or near their lag limit", labels=["cluster"])
        if now_ms is not None:
            counts = self.store.followers_predicted_to_shrink(now_ms, self.settings.shrink_window_ms)
            for cluster, count in counts.items():
                predicted.add_metric([cluster], count)
        yield predicted
        yield from self._allow_listed_partitions()

    def _allow_listed_partitions(self) -> Iterator[Metric]:
        topics = self.settings.partition_metrics_topics
        if not topics:
            return
        isr = GaugeMetricFamily("isrwatch_partition_in_sync_replicas", "ISR size (allow-listed topics)",
                                labels=_PARTITION_LABELS)
        assigned = GaugeMetricFamily("isrwatch_partition_replicas", "Assigned replicas (allow-listed topics)",
                                     labels=_PARTITION_LABELS)
        under = GaugeMetricFamily("isrwatch_partition_under_replicated",
                                  "1 when under-replicated (allow-listed topics)", labels=_PARTITION_LABELS)
        for record in self.store.topic_partitions(topics):
            labels = [record["cluster"], record["topic"], str(record["partition"])]
            isr.add_metric(labels, len(record["isr"]))
            assigned.add_metric(labels, len(record["replicas"]))
            under.add_metric(labels, int(record["under_replicated"]))
        yield from (isr, assigned, under)

    def _followers(self, now_ms: int | None) -> Iterator[Metric]:
        """Top-N ISR followers by time since caught up and top-N by lag, plus every follower of allow-listed topics."""
        since = GaugeMetricFamily("isrwatch_follower_time_since_caught_up_seconds",
                                  "Event time since an ISR follower behind the leader last caught up (top N)",
                                  labels=_FOLLOWER_LABELS)
        lag = GaugeMetricFamily("isrwatch_follower_lag_offsets", "Leader LEO minus follower LEO (top N)",
                                labels=_FOLLOWER_LABELS)
        store, n = self.store, self.settings.top_followers
        listed = store.followers(order="topic", topics=self.settings.partition_metrics_topics)
        slowest = store.followers(order="caught_up", limit=n) if n > 0 else []
        laggiest = store.followers(order="lag", limit=n) if n > 0 else []

        def seconds_since(row: tuple) -> float | None:
            return (now_ms - row[4]) / 1000 if row[6] and now_ms is not None else None

        for family, rows, value in ((since, slowest + listed, seconds_since), (lag, laggiest + listed, lambda r: r[5])):
            seen: set[tuple] = set()
            for row in rows:
                v = value(row)
                if v is not None and row[:4] not in seen:
                    seen.add(row[:4])
                    family.add_metric([row[0], row[1], str(row[2]), str(row[3])], v)
        yield since
        yield lag

    def _brokers(self, now_ms: int | None) -> Iterator[Metric]:
        pending = GaugeMetricFamily("isrwatch_broker_pending_isr_changes",
                                    "Partitions in a leader broker's ISR-change set not yet propagated",
                                    labels=["cluster", "broker"])
        since = GaugeMetricFamily("isrwatch_broker_seconds_since_last_propagation",
                                  "Event time since a broker's last ISR-change batch", labels=["cluster", "broker"])
        for b in self.store.broker_propagation():
            labels = [b["cluster"], str(b["broker"])]
            pending.add_metric(labels, len(b["pending"]))
            if now_ms is not None and b["last_propagation_ms"] is not None:
                since.add_metric(labels, (now_ms - b["last_propagation_ms"]) / 1000)
        yield pending
        yield since

    def _tallies(self) -> Iterator[Metric]:
        counters = {metric: CounterMetricFamily(name, text, labels=labels)
                    for metric, (name, text, labels) in _COUNTERS.items()}
        # histogram -> cluster -> {le: count}, sum, count
        buckets: dict[str, dict[str, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
        sums: dict[str, dict[str, float]] = defaultdict(dict)
        for metric, labels, value in self.store.tallies():
            if metric in counters:
                counters[metric].add_metric([labels.get(k, "") for k in _COUNTERS[metric][2]], value)
            elif metric.endswith("_bucket"):
                buckets[metric.removesuffix("_bucket")][labels["cluster"]][labels["le"]] = value
            elif metric.endswith("_sum"):
                sums[metric.removesuffix("_sum")][labels["cluster"]] = value
        yield from counters.values()
        for metric, (name, text, bounds) in _HISTOGRAMS.items():
            family = HistogramMetricFamily(name, text, labels=["cluster"])
            for cluster, counts in sorted(buckets[metric].items()):
                cumulative, series = 0.0, []
                for le in [f"{b:g}" for b in bounds] + ["+Inf"]:
                    cumulative += counts.get(le, 0)
                    series.append((le, cumulative))
                family.add_metric([cluster], series, sums[metric].get(cluster, 0.0))
            yield family

    def _stream(self, position: StreamPosition | None) -> Iterator[Metric]:
        wall_s = time.time()
        progress = self.store.latest_progress() or {}
        gauges = [
            ("isrwatch_stream_batch_duration_seconds", "Duration of the last micro-batch",
             _scaled(progress.get("batch_duration_ms"), 1000)),
            ("isrwatch_stream_input_rows_per_second", "Input rate of the last micro-batch",
             progress.get("input_rows_per_second")),
            ("isrwatch_stream_state_rows", "Rows in the streaming state store", progress.get("state_rows")),
        ]
        if position is not None:
            watermark_ms = position.watermark_ms
            gauges += [
                ("isrwatch_stream_last_batch_age_seconds", "Wall-clock time since the last batch committed",
                 wall_s - position.committed_wall_ms / 1000),
                ("isrwatch_stream_watermark_seconds", "The settled watermark (event time, epoch seconds)",
                 _scaled(watermark_ms, 1000)),
                ("isrwatch_stream_watermark_lag_seconds", "Wall clock minus the settled watermark",
                 None if watermark_ms is None else wall_s - watermark_ms / 1000),
            ]
        for name, text, value in gauges:
            family = GaugeMetricFamily(name, text)
            if value is not None:
                family.add_metric([], value)
            yield family


def _scaled(value: float | None, divisor: float) -> float | None:
    return None if value is None else value / divisor


def registry_for(store: Store, settings: Settings) -> CollectorRegistry:
    """A registry of its own per app, so several apps (tests, benchmarks) never share series."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(store, settings))
    return registry
