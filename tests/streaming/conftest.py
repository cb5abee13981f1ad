"""Fixtures for the streaming tests: one local[2] Spark session (real Kafka: the session `lab`, tests/conftest.py)."""

from __future__ import annotations

import pytest

from streaming.spark import SparkSettings, session


@pytest.fixture(scope="session")
def spark():
    """The process's Spark session (local[2], UI off): every in-process query of the suite shares it."""
    return session(SparkSettings(shuffle_partitions=2, driver_memory="1g"))
