"""/v1/observed and /v1/divergences: what brokers did (agent input) and where the model disagreed, newest first."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Query
from fastapi.responses import Response
from pydantic import BaseModel

from state.audit import DivergenceKind
from state.events import MAX_ID

from ..deps import StoreDep, data_router
from ..models import DivergencePage, ObservedPage
from ..pages import PageQ, read_page
from ..params import BrokerQ, ClusterQ, SinceQ, TopicQ

router = data_router("/v1", "audit")
PartitionQ = Annotated[int | None, Query(ge=0, le=MAX_ID, description="partition number (with topic)")]


class AuditFilters(BaseModel):
    """The query parameters both audit routes filter by: where, at which broker (each route adds its own)."""

    cluster: ClusterQ = None
    broker: BrokerQ = None
    topic: TopicQ = None
    partition: PartitionQ = None


class ObservedFilters(AuditFilters):
    type: Literal["isr_updated", "isr_change_propagated"] | None = None
    since: SinceQ = None


class DivergenceFilters(AuditFilters):
    kind: DivergenceKind | None = None
    subject: Literal["isr", "propagation"] | None = None
    since: SinceQ = None


@router.get(
    "/observed",
    response_model=ObservedPage,
    summary="What brokers did: their ISR writes and ISR-change notifications (isrwatch-agent), newest first",
)
def list_observed(store: StoreDep, filters: Annotated[ObservedFilters, Query()], page: PageQ) -> Response:
    return read_page("observed", store.observed, page, **dict(filters))


@router.get(
    "/divergences",
    response_model=DivergencePage,
    summary="Where the model and a broker disagreed (the live audit of agent input), newest first",
)
def list_divergences(store: StoreDep, filters: Annotated[DivergenceFilters, Query()], page: PageQ) -> Response:
    return read_page("divergences", store.divergences, page, **dict(filters))
