"""The streaming plan: source rows -> framer -> one applyInPandasWithState over buckets (no Spark watermark:
each bucket keeps every cluster's event time itself, see `stateful`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from isrwatch.state.config import Config

from .buckets import Layout
from .framing import frame
from .reports import REPORT_SCHEMA, STATE_SCHEMA
from .stateful import state_function

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def plan(
    raw: DataFrame,
    config: Config,
    layout: Layout,
    ranks: dict[str, int] | None = None,
    until: int | None = None,
    keep_blobs: bool = False,
) -> DataFrame:
    """Reports (bucket int, report binary) from source rows; see `framing` and `stateful`."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    return (
        frame(raw, layout, ranks, until)
        .groupBy("bucket")
        .applyInPandasWithState(
            state_function(config, list(layout.ids), until, keep_blobs),
            REPORT_SCHEMA,
            STATE_SCHEMA,
            "append",
            GroupStateTimeout.NoTimeout,
        )
    )
