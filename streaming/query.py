"""The streaming plan: source rows -> framer -> watermark -> one applyInPandasWithState over buckets."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from state.config import Config, ConfigError

from .buckets import bucket_ids
from .framing import LATE_HORIZON_MS, frame
from .reports import REPORT_SCHEMA, STATE_SCHEMA
from .stateful import state_function

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from .checkpoint import Checkpoint

DEFAULT_BUCKETS = 16
LAYOUT_FILE = "isrwatch-layout.json"


@dataclass(frozen=True)
class Layout:
    """How partitions map to state keys; fixed by the checkpoint like Spark's shuffle partitions."""

    buckets: int
    shuffle_partitions: int
    ids: tuple[int, ...]

    @classmethod
    def create(cls, buckets: int, shuffle_partitions: int) -> Layout:
        return cls(buckets, shuffle_partitions, tuple(bucket_ids(buckets, shuffle_partitions)))

    @classmethod
    def for_checkpoint(cls, checkpoint: Checkpoint, buckets: int | None, shuffle_partitions: int) -> Layout:
        """The checkpoint's layout, or a new one saved there; a different explicit --buckets is an error."""
        text = checkpoint.read_text(LAYOUT_FILE)
        if text is not None:
            saved = json.loads(text)
            layout = cls(saved["buckets"], saved["shuffle_partitions"], tuple(saved["ids"]))
            if buckets is not None and buckets != layout.buckets:
                raise ConfigError(f"checkpoint {checkpoint.uri} keeps its state in {layout.buckets} buckets; "
                                  f"use --buckets {layout.buckets} or a new --checkpoint for {buckets}")
            return layout
        layout = cls.create(buckets or DEFAULT_BUCKETS, shuffle_partitions)
        checkpoint.write_text(LAYOUT_FILE, json.dumps(asdict(layout)) + "\n")
        return layout


def plan(raw: DataFrame, config: Config, layout: Layout, ranks: dict[str, int] | None = None,
         until: int | None = None, keep_blobs: bool = False) -> DataFrame:
    """Reports (bucket int, report binary) from source rows; see `framing` and `stateful`."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    delay = LATE_HORIZON_MS + config.allowed_lateness_ms
    framed = frame(raw, layout, ranks, until).withWatermark("event_time", f"{delay} milliseconds")
    return framed.groupBy("bucket").applyInPandasWithState(
        state_function(config, list(layout.ids), until, keep_blobs), REPORT_SCHEMA, STATE_SCHEMA, "append",
        GroupStateTimeout.EventTimeTimeout)
