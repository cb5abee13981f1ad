"""Who may call what: bearer token, CORS, the status page, and the health and readiness probes."""

from __future__ import annotations

import time
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from state.store import open_store
from streaming.cli import main as isrwatch
from tests.pg import fresh_database

SCENARIO = Path(__file__).parents[1] / "scenarios" / "01-stuck-follower-shrink"
DATA_ROUTES = ["/v1/partitions", "/v1/partitions/orders/0", "/v1/partitions/orders/0/isr",
               "/v1/partitions/orders/0/history", "/v1/brokers", "/v1/brokers/1", "/v1/decisions",
               "/v1/propagations", "/v1/dead-letters", "/metrics"]


@pytest.fixture
def scenario_url(tmp_path: Path) -> str:
    """Scenario 01 replayed into a SQLite store through `isrwatch replay --store`."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    assert isrwatch(["replay", f"{SCENARIO}.events.jsonl", "--config", f"{SCENARIO}.config.json",
                     "--until", (SCENARIO.parent / f"{SCENARIO.name}.until").read_text().strip(),
                     "--store", url]) == 0
    return url


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


def test_without_a_status_page_root_is_a_json_404(scenario_url: str, tmp_path: Path) -> None:
    with TestClient(create_app(scenario_url, static_dir=tmp_path / "none")) as client:
        r = client.get("/")
        assert r.status_code == 404 and r.json()["error"] == "not_found"
        assert client.get("/static/app.js").status_code == 404


def test_cors_is_off_unless_configured(scenario_url: str) -> None:
    origin = {"Origin": "https://grafana.example"}
    with TestClient(create_app(scenario_url)) as client:
        assert "access-control-allow-origin" not in client.get("/v1/partitions", headers=origin).headers
    with TestClient(create_app(scenario_url, cors_origins=("https://grafana.example",))) as client:
        r = client.get("/v1/partitions", headers=origin)
        assert r.headers["access-control-allow-origin"] == "https://grafana.example"
        other = client.get("/v1/partitions", headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in other.headers


def test_readyz_needs_a_batch_then_a_fresh_one(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    with TestClient(create_app(url, ready_max_batch_age_s=0.5, ready_max_watermark_lag_s=60)) as client:
        r = client.get("/readyz")
        assert r.status_code == 503
        assert r.json() == {"error": "not_ready", "detail": "no batch committed to the store yet"}
        with open_store(url) as store:
            store.write_batch(0, watermark_ms=int(time.time() * 1000) - 5_000)
        r = client.get("/readyz")
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["status"] == "ready" and body["last_batch_id"] == 0
        assert 4.5 < body["watermark_lag_seconds"] < 30
        time.sleep(0.6)
        r = client.get("/readyz")
        assert r.status_code == 503
        assert r.json()["detail"].startswith("last batch 0 committed")
        assert client.get("/healthz").json() == {"status": "ok"}


def test_readyz_reports_a_stale_watermark(scenario_url: str) -> None:
    with TestClient(create_app(scenario_url)) as client:  # scenario time is 1970: decades behind
        r = client.get("/readyz")
        assert r.status_code == 503
        assert "watermark lags the wall clock" in r.json()["detail"]
    with TestClient(create_app(scenario_url, ready_max_watermark_lag_s=0)) as client:
        assert client.get("/readyz").status_code == 200


def test_a_lost_database_is_503_and_health_stays_up(postgres_server_url: str) -> None:
    url = fresh_database(postgres_server_url)
    with TestClient(create_app(url, ready_max_watermark_lag_s=0)) as client:
        with open_store(url) as store:
            store.write_batch(0, watermark_ms=1)
        assert client.get("/readyz").status_code == 200
        name = url.rsplit("/", 1)[1]
        with psycopg.connect(postgres_server_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
        for path in ("/readyz", "/v1/partitions", "/metrics"):
            r = client.get(path)
            assert r.status_code == 503, path
            assert r.json()["error"] == "store_unavailable"
        assert client.get("/healthz").status_code == 200
