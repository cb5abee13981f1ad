"""Fixtures shared by every test room: one Spark session, a private PostgreSQL server, a store URL per backend."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pg import fresh_database, postgres_server


@pytest.fixture(scope="session")
def spark():
    """The process's Spark session (local[2], UI off): every in-process query of the suite shares it."""
    from streaming.spark import SparkSettings, session

    return session(SparkSettings(shuffle_partitions=2, driver_memory="1g"))


@pytest.fixture(scope="session")
def postgres_server_url() -> Iterator[str]:
    """One private PostgreSQL server for the session, started on first use (never skipped)."""
    with postgres_server() as url:
        yield url


@pytest.fixture
def postgres_url(postgres_server_url: str) -> str:
    """A fresh, empty database on the private server."""
    return fresh_database(postgres_server_url)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty store on each backend the store supports."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'isrwatch.db'}"
    return request.getfixturevalue("postgres_url")
