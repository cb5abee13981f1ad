"""/docs (Swagger UI) and /redoc (ReDoc) that work offline: their scripts and styles are the `fastapi-offline`
package's copies, served by the app under /static-docs, and each page forbids the browser every other origin (ReDoc's
bundle would fetch its footer logo from a CDN)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
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


# Each page: FastAPI's renderer (ReDoc's without Google's fonts, an origin the policy forbids), the name its title
# ends with, and the files it loads from PREFIX, by the renderer's keyword for each.
PAGES: dict[str, tuple[Callable[..., HTMLResponse], str, dict[str, str]]] = {
    "/docs": (
        get_swagger_ui_html,
        "Swagger UI",
        {
            "swagger_js_url": "swagger-ui-bundle.js",
            "swagger_css_url": "swagger-ui.css",
            "swagger_favicon_url": "favicon.png",
        },
    ),
    "/redoc": (
        partial(get_redoc_html, with_google_fonts=False),
        "ReDoc",
        {"redoc_js_url": "redoc.standalone.js", "redoc_favicon_url": "favicon.png"},
    ),
}


def _page(
    app: FastAPI, render: Callable[..., HTMLResponse], name: str, files: dict[str, str]
) -> Callable[[Request], Awaitable[HTMLResponse]]:
    """One docs page: its URLs under the app's root path, and the policy that keeps the browser off other origins."""

    async def page(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        urls = {keyword: f"{root}{PREFIX}/{file}" for keyword, file in files.items()}
        response = render(openapi_url=f"{root}{app.openapi_url}", title=f"{app.title} - {name}", **urls)
        response.headers["Content-Security-Policy"] = POLICY
        return response

    return page


def install(app: FastAPI) -> None:
    """Serve the docs pages and their files (the app is made with docs_url=None and redoc_url=None)."""
    app.mount(PREFIX, StaticFiles(directory=FILES), name="docs-static")
    for path, (render, name, files) in PAGES.items():
        app.add_api_route(path, _page(app, render, name, files), methods=["GET"], include_in_schema=False)
