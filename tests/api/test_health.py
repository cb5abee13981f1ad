"""The open routes: /healthz, /readyz (the store answers and the stream is fresh), the status page at /."""

from __future__ import annotations

import time
from pathlib import Path

import psycopg
from fastapi.testclient import TestClient

from isrwatch.api.app import create_app
from isrwatch.api.routers.health import NO_BATCH
from isrwatch.store import open_store
from tests.support.pg import fresh_database


def test_without_a_status_page_root_is_a_json_404(scenario_url: str, tmp_path: Path) -> None:
    with TestClient(create_app(scenario_url, static_dir=tmp_path / "none")) as client:
        r = client.get("/")
        assert r.status_code == 404 and r.json()["error"] == "not_found"
        assert client.get("/static/app.js").status_code == 404


def test_readyz_needs_a_batch_then_a_fresh_one(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    with TestClient(create_app(url, ready_max_batch_age_s=0.5, ready_max_watermark_lag_s=60)) as client:
        r = client.get("/readyz")
        assert r.status_code == 503
        assert r.json() == {"error": "not_ready", "detail": NO_BATCH}
        assert "isrwatch run" in NO_BATCH and "sqlite:///var/isrwatch.db" in NO_BATCH
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


def test_readyz_lists_the_kafka_records_the_source_lost(tmp_path: Path) -> None:
    """Records deleted before the stream read them, tallied once per batch id, show on /readyz, ready or not."""
    url = f"sqlite:///{tmp_path / 'r.db'}"
    with open_store(url) as store:
        store.write_batch(0, watermark_ms=int(time.time() * 1000))
        for batch_id in (0, 1, 1):  # batch 1 reported twice: counted once
            lost = [("isrwatch.events", 2, 40), ("isrwatch.events", 0, 7)] if batch_id else [("isrwatch.events", 2, 3)]
            store.record_progress({"batch_id": batch_id, "wall_ms": 0, "lost_records": lost})
    with TestClient(create_app(url, ready_max_watermark_lag_s=60)) as client:
        r = client.get("/readyz")
        assert r.status_code == 200, r.text
        assert r.json()["source_lost_records"] == [
            {"topic": "isrwatch.events", "partition": 0, "records": 7},
            {"topic": "isrwatch.events", "partition": 2, "records": 43},
        ]
    with TestClient(create_app(url, ready_max_batch_age_s=1e-3)) as client:
        r = client.get("/readyz")
        assert r.status_code == 503
        assert r.json()["detail"].endswith("; the source lost 50 Kafka records (see /metrics)")


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
