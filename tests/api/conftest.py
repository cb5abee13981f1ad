"""API fixtures: the fleet streamed once per backend into a store, and clients over it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from isrwatch.api.app import create_app
from isrwatch.store import open_store
from tests.support.fleet import Streamed, fleet_lines, stream_into
from tests.support.pg import store_url
from tests.support.replays import replay_scenario


@pytest.fixture(scope="session", params=["sqlite", "postgresql"])
def fleet_store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Streamed]:
    """(store URL, what the engine produced) for the two-cluster fleet, on each backend; read-only for tests."""
    url = store_url(request, tmp_path_factory.mktemp("fleet") / "isrwatch.db")
    with open_store(url) as store:
        return url, stream_into(store, fleet_lines())


@pytest.fixture(scope="session")
def fleet(fleet_store: tuple[str, Streamed]) -> Streamed:
    return fleet_store[1]


@pytest.fixture(scope="session")
def client(fleet_store: tuple[str, Streamed]) -> Iterator[TestClient]:
    """A client of the API over the fleet store, no token."""
    with TestClient(create_app(fleet_store[0])) as c:
        yield c


@pytest.fixture
def scenario_url(tmp_path: Path) -> str:
    """Scenario 01 replayed into a SQLite store through `isrwatch replay --store`."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    assert replay_scenario("01-stuck-follower-shrink", "--store", url) == 0
    return url
