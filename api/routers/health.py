"""Open routes: the probes (/healthz: the process is up; /readyz: the store answers and the stream is fresh),
the status page at /, which asks the data routes itself, and the alerts' runbook at /runbooks."""

from __future__ import annotations

import time

from fastapi import APIRouter
from fastapi.responses import FileResponse, HTMLResponse, Response

from isrwatch.store import DEFAULT_STORE, STORE_ENV

from ..deps import SettingsDep, StoreDep
from ..errors import ApiError, not_found
from ..models import ErrorBody, Health, Readiness
from ..params import JSON
from ..runbooks import render

router = APIRouter(tags=["health"])
# An empty store is the stream not started yet, or a `serve --store` that names another store than the job writes.
NO_BATCH = (
    "no batch committed to the store yet: no streaming job (isrwatch run) or isrwatch replay --store has written it; "
    f"if one runs, it writes another store than this API reads (--store, default ${STORE_ENV} or {DEFAULT_STORE})"
)


@router.get("/healthz", response_model=Health, summary="The process is up")
async def healthz() -> Response:
    return JSON({"status": "ok"})


@router.get(
    "/readyz",
    response_model=Readiness,
    summary="The store answers and the stream is fresh",
    responses={503: {"model": ErrorBody, "description": "not ready; the detail says why"}},
)
async def readyz(store: StoreDep, settings: SettingsDep) -> Response:
    position = store.stream_position()
    if position is None:
        raise ApiError(503, NO_BATCH, code="not_ready")
    wall_ms = time.time() * 1000
    age_s = (wall_ms - position.committed_wall_ms) / 1000
    lag_s = None if position.watermark_ms is None else (wall_ms - position.watermark_ms) / 1000
    problems = []
    if settings.ready_max_batch_age_s and age_s > settings.ready_max_batch_age_s:
        problems.append(
            f"last batch {position.batch_id} committed {age_s:.1f} s ago (limit {settings.ready_max_batch_age_s:g} s)"
        )
    if settings.ready_max_watermark_lag_s:
        if lag_s is None:
            problems.append("no watermark committed yet")
        elif lag_s > settings.ready_max_watermark_lag_s:
            problems.append(
                f"watermark lags the wall clock by {lag_s:.1f} s (limit {settings.ready_max_watermark_lag_s:g} s)"
            )
    lost = store.lost_records()
    if problems:
        missed = sum(records for _, _, records in lost)
        said = [f"the source lost {missed:,} Kafka records (see /metrics)"] if missed else []
        raise ApiError(503, "; ".join(problems + said), code="not_ready")
    return JSON(
        {
            "status": "ready",
            "last_batch_id": position.batch_id,
            "last_batch_age_seconds": round(age_s, 3),
            "watermark_ms": position.watermark_ms,
            "watermark_lag_seconds": None if lag_s is None else round(lag_s, 3),
            "source_lost_records": [
                {"topic": topic, "partition": partition, "records": records} for topic, partition, records in lost
            ],
        }
    )


@router.get("/", include_in_schema=False)
def status_page(settings: SettingsDep) -> Response:
    """The status page when one is installed under api/static (no token: it asks the data routes itself)."""
    index = settings.static_dir / "index.html"
    if not index.is_file():
        raise not_found("no status page installed; the API is under /v1 (see /docs)")
    return FileResponse(index)


@router.get("/runbooks", include_in_schema=False)
def runbooks(settings: SettingsDep) -> Response:
    """The alerts' runbook (docs/alerts.md, installed as static/alerts.md) as a page: every alert's `runbook_url`
    is its section here, `/runbooks#<alertname in lower case>` (no token: a notification's reader opens it)."""
    source = settings.static_dir / "alerts.md"
    if not source.is_file():
        raise not_found("no runbook installed")
    return HTMLResponse(render(source.read_text()))
