"""What an operator can tune in the API (`isrwatch serve` flags map one to one onto these fields)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

TOKEN_ENV = "ISRWATCH_API_TOKEN"
# Resolved: an editable install links each file, and the static files server refuses links that leave its directory.
STATIC_DIR = Path(__file__).resolve().parent / "static"


@dataclass(frozen=True)
class Settings:
    """API behaviour; times of event-time quantities in ms, freshness limits in wall-clock seconds.

    `shrink_window_ms`: a follower counts as predicted to shrink when it becomes eligible for removal
    within this much event time (None = half its lag). `ready_max_*`: /readyz limits, 0 = unchecked.
    """

    token: str | None = None
    cors_origins: tuple[str, ...] = ()
    shrink_window_ms: int | None = None
    top_followers: int = 10
    partition_metrics_topics: tuple[str, ...] = ()
    ready_max_batch_age_s: float = 300.0
    ready_max_watermark_lag_s: float = 600.0
    static_dir: Path = STATIC_DIR
