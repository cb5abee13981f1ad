"""The bearer-token dependency: it guards every data route, and without a token everything is open."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from isrwatch.api.app import create_app

DATA_ROUTES = [
    "/v1/partitions",
    "/v1/partitions/orders/0",
    "/v1/partitions/orders/0/isr",
    "/v1/partitions/orders/0/history",
    "/v1/brokers",
    "/v1/brokers/1",
    "/v1/decisions",
    "/v1/propagations",
    "/v1/dead-letters",
    "/metrics",
]


@pytest.fixture
def static_dir(tmp_path: Path) -> Path:
    static = tmp_path / "static"
    static.mkdir()
    (static / "index.html").write_text("<!doctype html><title>isrwatch</title><script src=/static/app.js></script>")
    (static / "app.js").write_text("fetch('/v1/partitions')")
    return static


def test_a_token_guards_every_data_route(scenario_url: str, static_dir: Path) -> None:
    with TestClient(create_app(scenario_url, token="s3cret", static_dir=static_dir)) as client:
        for path in DATA_ROUTES:
            r = client.get(path)
            assert r.status_code == 401, path
            assert r.json()["error"] == "unauthorized"
            assert r.headers["www-authenticate"] == "Bearer"
            assert client.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
            assert client.get(path, headers={"Authorization": "Basic s3cret"}).status_code == 401
            assert client.get(path, headers={"Authorization": "Bearer s3cret"}).status_code == 200, path
        # Probes, docs and the status page stay open.
        assert client.get("/healthz").status_code == 200
        assert client.get("/readyz").status_code in (200, 503)
        assert client.get("/openapi.json").status_code == 200
        page = client.get("/")
        assert page.status_code == 200 and page.text.startswith("<!doctype html>")
        assert client.get("/static/app.js").text == "fetch('/v1/partitions')"
        assert client.get("/static/missing.js").status_code == 404


def test_without_a_token_everything_is_open(scenario_url: str) -> None:
    with TestClient(create_app(scenario_url)) as client:
        for path in DATA_ROUTES:
            assert client.get(path).status_code == 200, path
