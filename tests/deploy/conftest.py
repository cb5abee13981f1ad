"""The real API (`isrwatch serve`) over a demo store, shared by the metric-name checks and the Prometheus test."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.deploy import BIN, commit_demo_batch, wait_until
from tests.support.net import free_port


@pytest.fixture(scope="session")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A SQLite store holding one committed batch of demo data."""
    url = f"sqlite:///{tmp_path_factory.mktemp('demo-store') / 'isrwatch.db'}"
    commit_demo_batch(url, int(time.time() * 1000))
    return url


@pytest.fixture(scope="session")
def api_url(demo_store: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL of `isrwatch serve` on a free loopback port (uvicorn, one worker) over the demo store."""
    port = free_port()
    log = tmp_path_factory.mktemp("api") / "serve.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [
                BIN / "isrwatch",
                "serve",
                "--store",
                demo_store,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--log-level",
                "warning",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        assert proc.poll() is None, f"isrwatch serve exited {proc.returncode}:\n{log.read_text()}"
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200

    try:
        wait_until(healthy, 30, f"isrwatch serve on {url}")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="session")
def exported_series(api_url: str) -> set[str]:
    """Names of every series the API's /metrics exports (counters with _total, histograms with _bucket...)."""
    response = httpx.get(f"{api_url}/metrics", timeout=10)
    response.raise_for_status()
    return {sample.name for family in text_string_to_metric_families(response.text) for sample in family.samples}
