"""/v1/observed and /v1/divergences: what brokers did (agent input) and where the model disagreed, newest first."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Query
from pydantic import BaseModel

from isrwatch.state.events import MAX_ID
from isrwatch.state.records import Cause, DivergenceKind

from ..deps import data_router
from ..listing import list_route
from ..models import DivergencePage, ObservedPage
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
    type: Literal["isr_updated", "isr_change_propagated", "alter_partition_sent"] | None = None
    since: SinceQ = None


class DivergenceFilters(AuditFilters):
    kind: DivergenceKind | None = None
    cause: Cause | None = None
    subject: Literal["isr", "propagation"] | None = None
    since: SinceQ = None


list_route(
    router,
    "/observed",
    "observed",
    ObservedPage,
    ObservedFilters,
    "What brokers did: their ISR writes, ISR-change notifications and AlterPartition requests (isrwatch-agent), "
    "newest first",
)
list_route(
    router,
    "/divergences",
    "divergences",
    DivergencePage,
    DivergenceFilters,
    "Where the model and a broker disagreed (the live audit of agent input), newest first",
)
