"""/docs (Swagger UI) and /redoc (ReDoc) that work offline: their scripts and styles are the `fastapi-offline`
package's copies, served by the app under /static-docs, and each page forbids the browser every other origin (ReDoc's
bundle would fetch its footer logo from a CDN)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import fastapi_offline
from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

FILES = Path(fastapi_offline.__file__).parent / "static"
PREFIX = "/static-docs"
# Both pages start from an inline script; ReDoc's search runs in a worker made from a blob.
POLICY = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; worker-src 'self' blob:"
)


def _swagger_ui(openapi_url: str, title: str, files: str) -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url=openapi_url,
        title=f"{title} - Swagger UI",
        swagger_js_url=f"{files}/swagger-ui-bundle.js",
        swagger_css_url=f"{files}/swagger-ui.css",
        swagger_favicon_url=f"{files}/favicon.png",
    )


def _redoc(openapi_url: str, title: str, files: str) -> HTMLResponse:
    return get_redoc_html(
        openapi_url=openapi_url,
        title=f"{title} - ReDoc",
        redoc_js_url=f"{files}/redoc.standalone.js",
        redoc_favicon_url=f"{files}/favicon.png",
        with_google_fonts=False,
    )


PAGES: dict[str, Callable[[str, str, str], HTMLResponse]] = {"/docs": _swagger_ui, "/redoc": _redoc}


def _page(
    app: FastAPI, render: Callable[[str, str, str], HTMLResponse]
) -> Callable[[Request], Awaitable[HTMLResponse]]:
    """One docs page: its URLs under the app's root path, and the policy that keeps the browser off other origins."""

    async def page(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        response = render(f"{root}{app.openapi_url}", app.title, f"{root}{PREFIX}")
        response.headers["Content-Security-Policy"] = POLICY
        return response

    return page


def install(app: FastAPI) -> None:
    """Serve the docs pages and their files (the app is made with docs_url=None and redoc_url=None)."""
    app.mount(PREFIX, StaticFiles(directory=FILES), name="docs-static")
    for path, render in PAGES.items():
        app.add_api_route(path, _page(app, render), methods=["GET"], include_in_schema=False)
