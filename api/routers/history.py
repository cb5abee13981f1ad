"""/v1/decisions, /v1/propagations, /v1/dead-letters: what the job decided, sent and refused, newest first."""

from __future__ import annotations

from typing import Annotated

import msgspec
from fastapi import Query
from fastapi.responses import Response
from pydantic import BaseModel

from isrwatch.state.events import MAX_ID
from isrwatch.state.records import DecisionKind, Trigger
from isrwatch.store import Page

from ..deps import StoreDep, data_router
from ..listing import list_route
from ..models import DeadLetterPage, DecisionPage, PropagationPage
from ..pages import DEAD_LETTER_KEY, EVENT_KEY, PageQ, page_answer
from ..params import BrokerQ, CarryingTopicQ, ClusterQ, SinceQ, TopicQ

router = data_router("/v1", "history")


class HistoryFilters(BaseModel):
    """The query parameters a history route filters its records by (each route adds its own, then `since`)."""

    cluster: ClusterQ = None
    topic: TopicQ = None


class DecisionFilters(HistoryFilters):
    broker: Annotated[
        int | None, Query(ge=0, le=MAX_ID, description="the deciding leader or a replica added or removed")
    ] = None
    kind: DecisionKind | None = None
    since: SinceQ = None


class PropagationFilters(HistoryFilters):
    topic: CarryingTopicQ = None
    broker: BrokerQ = None
    trigger: Trigger | None = None
    since: SinceQ = None


class DeadLetterFilters(BaseModel):
    since: SinceQ = None


@router.get("/decisions", response_model=DecisionPage, name="list_decisions", summary="ISR decisions, newest first")
def list_decisions(store: StoreDep, filters: Annotated[DecisionFilters, Query()], page: PageQ) -> Response:
    """Each with its `proposal`: with AlterPartition a leader's shrink or expand is a proposal, pending until the
    controller commits or refuses it (SPEC §4.9)."""
    found = store.decisions(after=page.after(EVENT_KEY), limit=page.page_size, **dict(filters))
    items = [
        {**msgspec.to_builtins(d), "proposal": outcome}
        for d, outcome in zip(found.items, store.proposal_outcomes(found.items), strict=True)
    ]
    return page_answer("decisions", Page(items, found.next_key))


list_route(
    router,
    "/propagations",
    "propagations",
    PropagationPage,
    PropagationFilters,
    "ISR-change batches sent by leader brokers, newest first",
)
list_route(
    router,
    "/dead-letters",
    "dead_letters",
    DeadLetterPage,
    DeadLetterFilters,
    "Inputs that changed nothing, with the reason and field, newest first",
    DEAD_LETTER_KEY,
)
