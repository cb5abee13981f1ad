"""The list routes of the store's histories: one page of a table's records, newest first, filtered by a query model.

No `from __future__ import annotations` here: FastAPI reads the endpoint's annotations, and its query model is an
argument of `list_route`, which an annotation kept as a string could not name.
"""

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import Response
from pydantic import BaseModel

from .deps import StoreDep
from .pages import EVENT_KEY, PageQ, read_page


def list_route(
    router: APIRouter,
    path: str,
    records: str,
    response_model: type[BaseModel],
    query: type[BaseModel],
    summary: str,
    shape: tuple[type, ...] = EVENT_KEY,
) -> None:
    """GET `path` (operation `list_<records>`): the page of `store.<records>(**query)` under `records`; `shape` is
    the key its page tokens carry."""

    def endpoint(store: StoreDep, filters: Annotated[query, Query()], page: PageQ) -> Response:
        return read_page(records, getattr(store, records), page, shape, **dict(filters))

    router.add_api_route(
        path, endpoint, methods=["GET"], name=f"list_{records}", response_model=response_model, summary=summary
    )
