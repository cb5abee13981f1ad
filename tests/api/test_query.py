"""Query parameters as users write them, on every route: an unknown one is a 422 naming it and the ones the route
takes (a typo must not silently return everything), and `limit` pages like `page_size` on every paged list."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from isrwatch.api.app import create_app
from tests.support.fleet import Streamed


def test_a_misspelt_filter_is_a_422_naming_it_and_the_parameters_the_route_takes(client: TestClient) -> None:
    r = client.get("/v1/partitions?topc=orders")
    assert r.status_code == 422
    assert r.json() == {
        "error": "invalid_parameter",
        "detail": "unknown query parameter topc: /v1/partitions takes broker, cluster, limit, page_size, page_token, "
        "state, topic",
    }
    # Several at once, on a route whose parameters come from query models (filters and page), and on one with none.
    detail = client.get("/v1/decisions?knd=shrink&pagesize=1&kind=shrink").json()["detail"]
    assert detail.startswith("unknown query parameters knd, pagesize: /v1/decisions takes broker, cluster, kind, limit")
    assert client.get("/readyz?verbose=1").json()["detail"] == "unknown query parameter verbose: /readyz takes none"


def test_every_documented_route_refuses_an_unknown_parameter(client: TestClient) -> None:
    """Routes added later (other rooms' lists) are covered with no code of theirs: the rule reads each route's
    OpenAPI operation."""
    paths = client.get("/openapi.json").json()["paths"]
    for template in paths:
        path = re.sub(r"\{[^}]+\}", "1", template)
        r = client.get(f"{path}?no_such_parameter=1")
        assert r.status_code == 422, (path, r.text)
        assert r.json()["detail"].startswith(f"unknown query parameter no_such_parameter: {template} takes")
    assert len(paths) >= 15


def test_limit_is_the_page_size_on_every_paged_list(client: TestClient, fleet: Streamed) -> None:
    for path, items in (
        ("/v1/partitions", "partitions"),
        ("/v1/decisions", "decisions"),
        ("/v1/propagations", "propagations"),
        ("/v1/dead-letters", "dead_letters"),
    ):
        everything = client.get(path, params={"page_size": 1000}).json()[items]
        assert len(everything) > 1, path  # so that a limit ignored would show
        by_limit = client.get(path, params={"limit": 1}).json()
        assert by_limit == client.get(path, params={"page_size": 1}).json(), path
        assert by_limit[items] == everything[:1] and by_limit["next_page_token"] is not None, path
        follow = client.get(path, params={"limit": 1, "page_token": by_limit["next_page_token"]}).json()
        assert follow[items] == everything[1:2], path
    assert client.get("/v1/partitions/orders/0/history?limit=1").status_code in (200, 404)
    # limit is validated as page_size is, and naming both is ambiguous.
    r = client.get("/v1/partitions?limit=0")
    assert r.status_code == 422 and "page_size" in r.json()["detail"]
    r = client.get("/v1/partitions?limit=2&page_size=3")
    assert r.status_code == 422
    assert r.json()["detail"] == "limit: another name of page_size; give one of them"


def test_limit_is_unknown_where_nothing_pages(client: TestClient) -> None:
    r = client.get("/v1/brokers?limit=1")
    assert r.status_code == 422 and r.json()["detail"].startswith("unknown query parameter limit: /v1/brokers takes")


@pytest.mark.parametrize("path", ["/", "/docs?x=1", "/openapi.json?x=1"])
def test_the_page_and_the_docs_take_any_query(scenario_url: str, path: str) -> None:
    """Not API routes: a browser's or a bookmark's parameters must not break them."""
    with TestClient(create_app(scenario_url)) as c:
        assert c.get(path).status_code == 200
