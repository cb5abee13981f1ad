"""Stream health from Spark's query progress: a listener for one named query and the store's row."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

from .framing import INPUT_METRICS


def iso_ms(text: str) -> int:
    """Spark's progress timestamps ('2024-01-02T03:04:05.678Z') as epoch ms."""
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def input_lines(progress: dict[str, Any]) -> int:
    """Input lines (Kafka records) of the batch: Spark's own row count counts a whole file as one row."""
    return int(((progress.get("observedMetrics") or {}).get(INPUT_METRICS) or {}).get("lines") or 0)


@dataclass(frozen=True)
class Lost:
    """Records of one Kafka partition a micro-batch planned, [start, end), and never read: `records` of them,
    all before `first_read` (the first offset read, or `end`) when `head` — what retention deletes."""

    topic: str
    partition: int
    start: int
    end: int
    records: int
    first_read: int

    @property
    def head(self) -> bool:
        return self.first_read - self.start == self.records

    def __str__(self) -> str:
        where = (
            f"offsets {self.start}-{self.first_read - 1}"
            if self.head
            else f"{self.records:,} of the offsets {self.start}-{self.end - 1}"
        )
        return (
            f"source lost {self.records:,} records of {self.topic}-{self.partition}: {where} were deleted "
            "(retention or deleteRecords) before the job read them"
        )


def lost_records(progress: dict[str, Any]) -> list[Lost]:
    """The Kafka records a micro-batch planned and did not read, by partition: the source's offset range per
    partition (Spark's startOffset/endOffset, {topic: {partition: offset}}) against what the framing counted.

    Spark's Kafka source runs with failOnDataLoss=false and the kafka-python source resets to the earliest
    offset, so an offset that was deleted is skipped by both; counted here it is not skipped silently. The
    first batch of a new checkpoint has no start offsets (it starts wherever the topic begins): nothing to
    compare.
    """
    read: dict[tuple[str, int], tuple[int, int]] = {}
    for item in ((progress.get("observedMetrics") or {}).get(INPUT_METRICS) or {}).get("read") or ():
        topic, part, count, first = item.rsplit(":", 3)
        key = (topic, int(part))
        had, low = read.get(key, (0, int(first)))
        read[key] = (had + int(count), min(low, int(first)))
    lost = []
    for source in progress.get("sources") or ():
        start, end = source.get("startOffset"), source.get("endOffset")
        if not isinstance(start, dict) or not isinstance(end, dict):
            continue  # a files: source, or a first batch
        for topic, parts in end.items():
            if not isinstance(parts, dict):
                continue
            for part, stop in parts.items():
                begin = (start.get(topic) or {}).get(part, stop)
                count, first = read.get((topic, int(part)), (0, stop))
                if stop - begin > count:
                    lost.append(Lost(topic, int(part), begin, stop, stop - begin - count, first))
    return lost


def progress_record(progress: dict[str, Any], lost: Sequence[Lost] = ()) -> dict[str, Any]:
    """A StreamingQueryProgress (as JSON) reduced to the store's stream-health row, with the records its Kafka
    source `lost` (`lost_records`); the job fills in what the batch settled (its watermark, its late events),
    which Spark does not know."""
    spark_rows = progress.get("numInputRows", 0)
    lines = input_lines(progress)
    duration = progress.get("batchDuration", 0)
    per_row = lines / spark_rows if spark_rows else 0.0
    return {
        "batch_id": progress["batchId"],
        "wall_ms": iso_ms(progress["timestamp"]),
        "watermark_ms": None,
        "input_rows": lines,
        "input_rows_per_second": (progress.get("inputRowsPerSecond") or 0.0) * per_row,
        "processed_rows_per_second": lines * 1000 / duration if duration else 0.0,
        "batch_duration_ms": duration,
        "state_rows": sum(op.get("numRowsTotal", 0) for op in progress.get("stateOperators") or []),
        "late_rows": 0,
        "lost_records": [(gone.topic, gone.partition, gone.records) for gone in lost],
    }


class ProgressListener(StreamingQueryListener):
    """Hands the progress of one named query, as a dict, to a callback (on Spark's listener thread)."""

    def __init__(self, name: str, callback: Callable[[dict[str, Any]], None]) -> None:
        self.name = name
        self.callback = callback

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        if event.progress.name == self.name:
            self.callback(json.loads(event.progress.json))

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass
