"""The benchmarks' HTTP client (the standard library's: an installed isrwatch has no httpx) against a real
`isrwatch serve`: JSON bodies on one kept-alive connection, a failed status or a refused connection as OSError."""

from __future__ import annotations

from pathlib import Path

import pytest

from isrwatch.bench.measure import Http, free_port
from tests.support.net import serving
from tests.support.replays import replay_scenario


def test_http_reads_the_api_and_names_what_failed(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 's.db'}"
    assert replay_scenario("01-stuck-follower-shrink", "--store", store) == 0
    with serving(store) as base, Http(base, timeout=10) as api:
        body = api.json("/v1/partitions/orders/0/history", {"page_size": 1})
        assert [d["kind"] for d in body["decisions"]] == ["shrink"]
        kept = api._conn
        assert api.json("/v1/partitions")["partitions"][0]["topic"] == "orders"
        assert api._conn is kept  # one keep-alive connection
        with pytest.raises(OSError, match=r"GET /v1/partitions/nope/0: HTTP 404"):
            api.get("/v1/partitions/nope/0")
        assert api.get("/healthz") == b'{"status":"ok"}'  # still usable after a failed status
    with Http(f"http://127.0.0.1:{free_port()}", timeout=2) as nobody, pytest.raises(OSError, match="GET /healthz"):
        nobody.get("/healthz")
