"""The app factory: one FastAPI app over one store, run by uvicorn as a single worker per process."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.staticfiles import StaticFiles

from isrwatch.store import open_store

from . import docs, errors
from .metrics import registry_for
from .params import JSON
from .query import KnownQueryParameters
from .routers import alter_partitions, audit, brokers, health, history, incidents, metrics, partitions
from .settings import Settings

DESCRIPTION = """Read-only view of what isrwatch's streaming job (or a replay) wrote to its store: every
partition's leader, ISR, high watermark and follower lag as the leader sees it, the ISR decisions,
the ISR-change batches each leader broker propagated, and Prometheus metrics. With isrwatch-agent input
also what each broker did (`/v1/observed`) and where the model and a broker disagreed (`/v1/divergences`).
Leaders that propose their ISR changes with AlterPartition show each request and its outcome
(`/v1/alter-partitions`), each partition's pending ISR change and each broker's queue and request in flight.

Times ending in `_ms` are event time (epoch ms). "How long ago" values are measured from the
store's settled watermark (`as_of_ms`), never the wall clock. Lists are paginated with
`page_size` (or its other name, `limit`) and the opaque `page_token` from the previous page's `next_page_token`.
A query parameter that a route does not take is refused (422, naming it and the ones it takes). Errors are
`{"error": code, "detail": text}`. When the server runs with a token, every route but `/healthz`,
`/readyz`, the docs, the status page and the alerts' runbook (`/runbooks`) needs `Authorization: Bearer <token>`."""


class StatusPageFiles(StaticFiles):
    """/static/* from the status page's directory, which may be installed after the app starts (404 until then)."""

    async def check_config(self) -> None:
        """Skip Starlette's startup check that would turn a missing directory into a 500."""


def create_app(store_url: str, settings: Settings | None = None, **overrides: Any) -> FastAPI:
    """An API over the store at `store_url`; `overrides` replace single `Settings` fields."""
    settings = replace(settings or Settings(), **overrides)
    store = open_store(store_url)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        store.close()

    app = FastAPI(
        title="isrwatch",
        version="1",
        description=DESCRIPTION,
        default_response_class=JSON,
        lifespan=lifespan,
        docs_url=None,  # docs.install serves them offline
        redoc_url=None,
    )
    app.state.store = store
    app.state.settings = settings
    app.state.registry = registry_for(store, settings)
    errors.install(app)
    docs.install(app)
    for module in (partitions, brokers, history, alter_partitions, audit, incidents, metrics, health):
        app.include_router(module.router)
    app.mount("/static", StatusPageFiles(directory=settings.static_dir, check_dir=False), name="static")
    app.add_middleware(KnownQueryParameters, api=app)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=["GET"],
            allow_headers=["Authorization"],
        )
    return app
