"""Validated parameters and page tokens: a bad one is a 422 naming it; unknown routes are JSON errors."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient


@pytest.mark.parametrize(
    "path,parameter",
    [
        ("/v1/partitions?page_size=0", "page_size"),
        ("/v1/partitions?page_size=1001", "page_size"),
        ("/v1/partitions?state=sad", "state"),
        ("/v1/partitions?broker=-1", "broker"),
        ("/v1/partitions?topic=a%20b", "topic"),
        ("/v1/partitions?cluster=a%00b", "cluster"),
        ("/v1/partitions?page_token=%21%21", "page_token"),
        ("/v1/decisions?page_token=WyJhIiwiYiIsMV0", "page_token"),  # a partitions token on the decisions list
        ("/v1/decisions?kind=grow", "kind"),
        ("/v1/decisions?since=abc", "since"),
        ("/v1/propagations?trigger=soon", "trigger"),
        ("/v1/partitions/orders/-1", "partition"),
        ("/v1/partitions/bad%20topic/0", "topic"),
        ("/v1/brokers/x", "broker"),
    ],
)
def test_bad_parameters_are_422_naming_the_parameter(client: TestClient, path: str, parameter: str) -> None:
    r = client.get(path)
    assert r.status_code == 422
    body = r.json()
    assert set(body) == {"error", "detail"} and body["error"] == "invalid_parameter"
    assert parameter in body["detail"].split(":")[0]


def test_unknown_routes_and_methods_are_json_errors(client: TestClient) -> None:
    r = client.get("/v2/partitions")
    assert r.status_code == 404 and r.json()["error"] == "not_found"
    r = client.post("/v1/partitions")
    assert r.status_code == 405 and r.json()["error"] == "method_not_allowed"
