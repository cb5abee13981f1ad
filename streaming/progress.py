"""Stream health from Spark's query progress: a listener for one named query and the store's row."""

from __future__ import annotations

import json
from collections.abc import Callable
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


def progress_record(progress: dict[str, Any]) -> dict[str, Any]:
    """A StreamingQueryProgress (as JSON) reduced to the store's stream-health row; the job fills in what the batch
    settled (its watermark, its late events), which Spark does not know."""
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
