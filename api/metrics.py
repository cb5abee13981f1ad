"""/metrics: a custom collector that reads the store at scrape time; every family is declared in `state.metrics`.

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

from isrwatch.state import metrics as m
from isrwatch.store import EventTime, Store, StreamPosition

from .settings import Settings


def _gauge(metric: m.Metric) -> GaugeMetricFamily:
    return GaugeMetricFamily(metric.name, metric.help, labels=list(metric.labels))


class StoreCollector(Collector):
    """Builds every isrwatch_ metric family from the store on each scrape."""

    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings

    def collect(self) -> Iterator[Metric]:
        store = self.store
        position = store.stream_position()
        now = store.event_time()
        yield from self._partitions(now)
        yield from self._followers(now)
        yield from self._brokers(now)
        yield from self._incidents()
        yield from self._tallies()
        yield from self._stream(position, now)

    def _partitions(self, now: EventTime) -> Iterator[Metric]:
        by_state = _gauge(m.PARTITIONS)
        singles = {flag: _gauge(metric) for flag, metric in m.PARTITIONS_BY_FLAG.items()}
        for cluster, total, *counts in self.store.partition_counts():
            by_state.add_metric([cluster, "total"], total)
            for flag, count in zip(m.PARTITION_FLAGS, counts, strict=True):
                by_state.add_metric([cluster, flag], count)
                singles[flag].add_metric([cluster], count)
        yield by_state
        yield from singles.values()
        predicted = _gauge(m.FOLLOWERS_PREDICTED_TO_SHRINK)
        for cluster, count in self.store.followers_predicted_to_shrink(now, self.settings.shrink_window_ms).items():
            predicted.add_metric([cluster], count)
        yield predicted
        yield from self._allow_listed_partitions()

    def _allow_listed_partitions(self) -> Iterator[Metric]:
        topics = self.settings.partition_metrics_topics
        if not topics:
            return
        isr, assigned, under = (
            _gauge(m.PARTITION_IN_SYNC_REPLICAS),
            _gauge(m.PARTITION_REPLICAS),
            _gauge(m.PARTITION_UNDER_REPLICATED),
        )
        for record in self.store.topic_partitions(topics):
            labels = [record.cluster, record.topic, str(record.partition)]
            isr.add_metric(labels, len(record.isr))
            assigned.add_metric(labels, len(record.replicas))
            under.add_metric(labels, int(record.under_replicated))
        yield from (isr, assigned, under)

    def _followers(self, now: EventTime) -> Iterator[Metric]:
        """Top-N ISR followers by time since caught up and top-N by lag, plus every follower of allow-listed topics."""
        since, lag = _gauge(m.FOLLOWER_TIME_SINCE_CAUGHT_UP), _gauge(m.FOLLOWER_LAG_OFFSETS)
        store, n = self.store, self.settings.top_followers
        listed = store.followers(order="topic", topics=self.settings.partition_metrics_topics)
        slowest = store.followers(order="caught_up", limit=n) if n > 0 else []
        laggiest = store.followers(order="lag", limit=n) if n > 0 else []

        def seconds_since(row: tuple) -> float | None:
            now_ms = now.of(row[0])
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

    def _brokers(self, now: EventTime) -> Iterator[Metric]:
        pending, since = _gauge(m.BROKER_PENDING_ISR_CHANGES), _gauge(m.BROKER_SECONDS_SINCE_LAST_PROPAGATION)
        clock, out_of_sync = _gauge(m.BROKER_CLOCK_OFFSET), _gauge(m.BROKER_OUT_OF_SYNC_REPLICAS)
        for b in self.store.brokers():  # every broker that hosts a replica or has propagation state
            labels = [b["cluster"], str(b["broker"])]
            out_of_sync.add_metric(labels, b["out_of_sync_replicas"])  # its view as a follower
            pending.add_metric(labels, len(b["pending"]))
            now_ms = now.of(b["cluster"])
            if now_ms is not None and b["last_propagation_ms"] is not None:
                since.add_metric(labels, (now_ms - b["last_propagation_ms"]) / 1000)
            if "clock_offset_ms" in b:
                clock.add_metric(labels, b["clock_offset_ms"] / 1000)
        yield pending
        yield since
        yield out_of_sync
        yield clock
        yield from self._alter_partition(now)

    def _alter_partition(self, now: EventTime) -> Iterator[Metric]:
        """Each leader's uncommitted ISR changes (the oldest one's age) and its AlterPartition queue and request in
        flight (SPEC §4.9), ages at its cluster's event time."""
        for rows, counted, aged in (
            (self.store.pending_by_leader(), m.BROKER_ISR_PENDING_PARTITIONS, m.BROKER_OLDEST_ISR_PENDING),
            (
                self.store.alter_partition_managers(),
                m.BROKER_ALTER_PARTITION_QUEUE,
                m.BROKER_ALTER_PARTITION_IN_FLIGHT_AGE,
            ),
        ):
            count, age = _gauge(counted), _gauge(aged)
            for cluster, broker, n, since_ms in rows:
                labels = [cluster, str(broker)]
                count.add_metric(labels, n)
                now_ms = now.of(cluster)
                if now_ms is not None and since_ms is not None:
                    age.add_metric(labels, (now_ms - since_ms) / 1000)
            yield from (count, age)

    def _incidents(self) -> Iterator[Metric]:
        """Open incidents by kind, and those with a partition under min ISR or offline (SPEC §8)."""
        open_, severe = _gauge(m.INCIDENTS_OPEN), _gauge(m.INCIDENTS_OPEN_UNDER_MIN_ISR)
        for cluster, kind, n, under in self.store.incidents_open():
            open_.add_metric([cluster, kind], n)
            severe.add_metric([cluster, kind], under)
        yield from (open_, severe)

    def _tallies(self) -> Iterator[Metric]:
        counters = {
            metric.tally: CounterMetricFamily(metric.name, metric.help, labels=list(metric.labels))
            for metric in m.CATALOGUE
            if metric.kind is m.Kind.COUNTER
        }
        histograms = [metric for metric in m.CATALOGUE if metric.kind is m.Kind.HISTOGRAM]
        # histogram tally -> its label values but `le` (the catalogue's order) -> {le: count}, and -> sum
        buckets: dict[str, dict[tuple[str, ...], dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
        sums: dict[str, dict[tuple[str, ...], float]] = defaultdict(dict)
        for tally, labels, value in self.store.tallies():
            if tally in counters:
                counters[tally].add_metric([labels.get(k, "") for k in m.TALLIED[tally].labels], value)
            elif tally.endswith(("_bucket", "_sum")) and (metric := m.TALLIED.get(tally.rpartition("_")[0])):
                name, part = metric.tally, tally.rpartition("_")[2]
                series_of = tuple(labels.get(k, "") for k in metric.labels)
                if part == "bucket":
                    buckets[name][series_of][labels["le"]] = value
                else:
                    sums[name][series_of] = value
        yield from counters.values()
        for metric in histograms:
            family = HistogramMetricFamily(metric.name, metric.help, labels=list(metric.labels))
            for series_of, counts in sorted(buckets[str(metric.tally)].items()):
                cumulative, series = 0.0, []
                for le in [f"{b:g}" for b in metric.buckets] + ["+Inf"]:
                    cumulative += counts.get(le, 0)
                    series.append((le, cumulative))
                family.add_metric(list(series_of), series, sums[str(metric.tally)].get(series_of, 0.0))
            yield family

    def _stream(self, position: StreamPosition | None, now: EventTime) -> Iterator[Metric]:
        wall_s = time.time()
        progress = self.store.latest_progress() or {}
        gauges = [
            (m.STREAM_BATCH_DURATION, _scaled(progress.get("batch_duration_ms"), 1000)),
            (m.STREAM_INPUT_ROWS_PER_SECOND, progress.get("input_rows_per_second")),
            (m.STREAM_STATE_ROWS, progress.get("state_rows")),
        ]
        if position is not None:
            watermark_ms = position.watermark_ms
            gauges += [
                (m.STREAM_LAST_BATCH_AGE, wall_s - position.committed_wall_ms / 1000),
                (m.STREAM_WATERMARK, _scaled(watermark_ms, 1000)),
                (m.STREAM_WATERMARK_LAG, None if watermark_ms is None else wall_s - watermark_ms / 1000),
            ]
        for metric, value in gauges:
            family = _gauge(metric)
            if value is not None:
                family.add_metric([], value)
            yield family
        clusters = _gauge(m.STREAM_CLUSTER_EVENT_TIME)
        for cluster, frontier in sorted(now.clusters.items()):
            clusters.add_metric([cluster], frontier / 1000)
        yield clusters


def _scaled(value: float | None, divisor: float) -> float | None:
    return None if value is None else value / divisor


def registry_for(store: Store, settings: Settings) -> CollectorRegistry:
    """A registry of its own per app, so several apps (tests, benchmarks) never share series."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(store, settings))
    return registry
