"""One error shape for every failure, `{"error": code, "detail": text}`, so clients parse a single format."""

from __future__ import annotations

import logging
import sqlite3

import psycopg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from isrwatch.store import StoreError

log = logging.getLogger("isrwatch.api")

_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    422: "invalid_parameter",
    503: "unavailable",
}


class ApiError(Exception):
    """A failure with its HTTP status, machine-readable code and human-readable detail."""

    def __init__(
        self, status: int, detail: str, code: str | None = None, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code or _CODES.get(status, "error")
        self.detail = detail
        self.headers = headers


def not_found(detail: str) -> ApiError:
    return ApiError(404, detail)


def invalid(parameter: str, problem: str) -> ApiError:
    """A 422 that names the offending parameter first, like the validation errors FastAPI raises."""
    return ApiError(422, f"{parameter}: {problem}")


def error_response(status: int, code: str, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": code, "detail": detail}, status_code=status, headers=headers)


def _validation_detail(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = [str(x) for x in err.get("loc", ())]
        where = f"{loc[0]} parameter {'.'.join(loc[1:])}" if len(loc) > 1 else ".".join(loc) or "request"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


def install(app: FastAPI) -> None:
    """Route every exception the app can raise to the common error shape."""

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.code, exc.detail, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(422, "invalid_parameter", _validation_detail(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        if exc.status_code == 404 and detail == "Not Found":
            detail = f"no route {request.url.path}"
        return error_response(
            exc.status_code, _CODES.get(exc.status_code, "error"), detail, getattr(exc, "headers", None)
        )

    async def _store_down(request: Request, exc: Exception) -> JSONResponse:
        log.warning("store error on %s: %s", request.url.path, exc)
        return error_response(503, "store_unavailable", f"the store did not answer: {type(exc).__name__}")

    for kind in (StoreError, sqlite3.Error, psycopg.Error):
        app.add_exception_handler(kind, _store_down)
