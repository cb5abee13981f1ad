"""/docs (Swagger UI) and /redoc (ReDoc) that work offline: their scripts and styles are the `fastapi-offline`
package's copies, served by the app under /static-docs, and each page forbids the browser every other origin (ReDoc's
bundle would fetch its footer logo from a CDN)."""

from __future__ import annotations

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


def install(app: FastAPI) -> None:
    """Serve the docs pages and their files (the app is made with docs_url=None and redoc_url=None)."""
    app.mount(PREFIX, StaticFiles(directory=FILES), name="docs-static")

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        page = get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{root}{PREFIX}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{PREFIX}/swagger-ui.css",
            swagger_favicon_url=f"{root}{PREFIX}/favicon.png",
        )
        page.headers["Content-Security-Policy"] = POLICY
        return page

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        page = get_redoc_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}{PREFIX}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{PREFIX}/favicon.png",
            with_google_fonts=False,
        )
        page.headers["Content-Security-Policy"] = POLICY
        return page
