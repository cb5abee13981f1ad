"""Query parameters as users write them, on every route of the API (its own and any added later), with no code of
the route's: an unknown one is a 422 naming it and the ones the route takes, since a typo that is ignored silently
returns everything (`?topc=orders` would list every topic); and `limit` is another name of `page_size` on every
route that pages, as most HTTP APIs call it.

A pure ASGI middleware, so it sees the request before FastAPI reads the parameters; the routes and the names each
takes are the operations of the app's OpenAPI document, the contract a client reads (the status page, the docs and
static files are none of them).
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode

from fastapi import FastAPI
from starlette.routing import compile_path
from starlette.types import ASGIApp, Receive, Scope, Send

from .errors import error_response

PAGE_SIZE = "page_size"
LIMIT = "limit"  # accepted wherever page_size is


class KnownQueryParameters:
    """Refuses a request with a query parameter its route does not declare, and reads `limit` as `page_size`."""

    def __init__(self, app: ASGIApp, api: FastAPI) -> None:
        self.app = app
        self.api = api
        self._operations: list[tuple[re.Pattern[str], str, dict[str, frozenset[str]]]] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("query_string"):
            found = self.taken(scope["path"], scope["method"])
            if found is not None:
                path, taken = found
                pairs = parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True)
                problem = _problem([name for name, _ in pairs], taken, path)
                if problem is not None:
                    await error_response(422, "invalid_parameter", problem)(scope, receive, send)
                    return
                if LIMIT in taken and any(name == LIMIT for name, _ in pairs):  # else the query goes on as it came
                    renamed = [(PAGE_SIZE if name == LIMIT else name, value) for name, value in pairs]
                    scope = {**scope, "query_string": urlencode(renamed).encode("latin-1")}
        await self.app(scope, receive, send)

    def taken(self, path: str, method: str) -> tuple[str, frozenset[str]] | None:
        """The documented route `path` goes to and the query parameters it takes for `method`, plus `limit` where it
        pages (None: not an operation of the OpenAPI document: the status page, a static file, the docs)."""
        if self._operations is None:
            self._operations = [
                (compile_path(template)[0], template, {m.upper(): _query_names(op) for m, op in operations.items()})
                for template, operations in self.api.openapi()["paths"].items()
            ]
        for pattern, template, methods in self._operations:
            if pattern.match(path) and method in methods:
                return template, methods[method]
        return None


def _query_names(operation: dict) -> frozenset[str]:
    names = {p["name"] for p in operation.get("parameters", ()) if p["in"] == "query"}
    return frozenset(names | ({LIMIT} if PAGE_SIZE in names else set()))


def _problem(given: list[str], taken: frozenset[str], path: str) -> str | None:
    """What is wrong with the query parameters `given` to a route that takes `taken` (None: nothing)."""
    unknown = sorted(set(given) - taken)
    if unknown:
        names = ", ".join(unknown)
        allowed = ", ".join(sorted(taken)) or "none"
        return f"unknown query parameter{'s' if len(unknown) > 1 else ''} {names}: {path} takes {allowed}"
    if LIMIT in given and PAGE_SIZE in given:
        return f"{LIMIT}: another name of {PAGE_SIZE}; give one of them"
    return None
