"""What the routes depend on, as `Annotated` dependencies: the store, the settings, event-time "now", the token.

All of them are `async`: they read attributes or one indexed row, so running them on the event loop
costs less than a thread hop (the point-read routes stay on the loop; the scans run in the pool).
"""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from isrwatch.store import EventTime, Store

from .errors import ApiError
from .params import ERRORS
from .settings import Settings


async def get_store(request: Request) -> Store:
    return request.app.state.store


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


StoreDep = Annotated[Store, Depends(get_store)]
SettingsDep = Annotated[Settings, Depends(get_settings)]


async def event_time(store: StoreDep) -> EventTime:
    """Event-time "now", per cluster: how far the stream has settled each (SPEC §6); never the wall clock."""
    return store.event_time()


NowDep = Annotated[EventTime, Depends(event_time)]

_bearer = HTTPBearer(auto_error=False, description="set when the API runs with --token / ISRWATCH_API_TOKEN")


async def require_token(
    settings: SettingsDep, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> None:
    """Bearer-token check for every data route (health probes and the status page stay open)."""
    expected = settings.token
    if expected is None:
        return
    if credentials is None or not secrets.compare_digest(credentials.credentials.encode(), expected.encode()):
        raise ApiError(401, "a valid bearer token is required", headers={"WWW-Authenticate": "Bearer"})


def data_router(prefix: str, tag: str) -> APIRouter:
    """A router of data routes: each is guarded by the token and documents the common error replies (`ERRORS`)."""
    return APIRouter(prefix=prefix, tags=[tag], dependencies=[Depends(require_token)], responses=ERRORS)
