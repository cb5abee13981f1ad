"""/metrics: the Prometheus exposition, built from the store at scrape time (see `api.metrics`)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..deps import require_token
from ..params import ERRORS

router = APIRouter(tags=["metrics"], dependencies=[Depends(require_token)])


@router.get(
    "/metrics",
    summary="Prometheus exposition, read from the store at scrape time",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}, **ERRORS},
)
def metrics(request: Request) -> Response:
    return Response(generate_latest(request.app.state.registry), media_type=CONTENT_TYPE_LATEST)
