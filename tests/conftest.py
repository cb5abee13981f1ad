"""Fixtures shared by every test room: one Spark session, a private PostgreSQL server, a store URL on each
backend, and two real Kafka labs for the session, one after the other: a KRaft lab (Kafka 4.4.0, 3 combined
nodes, a monitor node) and a ZooKeeper lab (ZooKeeper, 3 brokers, a monitor broker) with its shared fault runs and
the one stream over its events topic, and the KRaft lab's own stream (tests/support/lab.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from isrwatch.lab.cluster import Lab, LabSpec
from tests.support.lab import (
    KRAFT_FAULT_LOG,
    KRAFT_FAULTS,
    KRAFT_LABS,
    Restart,
    Stall,
    Streamed,
    kraft_session_spec,
    project_agent,
    retire_kraft_labs,
    run_restart,
    run_stall,
    running_lab,
    session_spec,
    stream_session,
)
from tests.support.pg import fresh_database, postgres_server


@pytest.fixture(scope="session")
def spark():
    """The process's Spark session (local[2], UI off): every in-process query of the suite shares it."""
    from isrwatch.lab.jars import spark_kafka_jars
    from isrwatch.streaming.spark import SparkSettings, session

    jars = tuple(str(p) for p in spark_kafka_jars())
    return session(SparkSettings(shuffle_partitions=2, driver_memory="1g", kafka_jars=jars))


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


LAB_FIXTURES = {"lab", "kraft_lab"}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests on the Kafka labs run last: a lab (four brokers, ZooKeeper or a quorum, a producer: about half a core)
    is started on first use and runs until the session ends (the KRaft lab: until the ZooKeeper lab starts), so
    every other test runs before either exists. The KRaft lab's tests come first, then the ZooKeeper lab's. Tests on
    the session's stream (the agent's tests, the reality suite) run after every other lab test: it covers the faults
    they ran (tests/support/lab.py FAULT_LOG).

    Under `make test`'s pytest-xdist (`-n 2 --dist loadgroup`) every lab test is in one group, run in this order on
    one worker (one real cluster per mode for the run) while the other worker runs the rest; a test whose fixtures
    include a module-scoped one is grouped with its module, so that fixture (a standalone Spark cluster, a packed
    venv) is built once."""

    def order(item: pytest.Item) -> tuple[bool, bool, bool]:
        uses = getattr(item, "fixturenames", ())
        return "kraft_lab" in uses or "lab" in uses, "lab" in uses, "streamed" in uses or "kraft_streamed" in uses

    items.sort(key=order)
    for item in items:
        group = xdist_group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))


def xdist_group(item: pytest.Item) -> str | None:
    """The pytest-xdist group `item` must share a worker with (`--dist loadgroup`), or None: any worker."""
    uses = set(getattr(item, "fixturenames", ()))
    if uses & LAB_FIXTURES:
        return "labs"
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info else ()
    if any(d.scope == "module" for chain in defs for d in chain):
        return item.nodeid.split("::")[0]
    return None


@pytest.fixture(scope="session")
def lab_spec() -> LabSpec:
    """The session lab's settings (tests/support/lab.py session_spec): a 5 s lag and isrwatch-agent on every broker."""
    return session_spec(project_agent())


@pytest.fixture(scope="session")
def lab(lab_spec: LabSpec, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """One real Kafka lab for the session, started on first use like `isrwatch lab up`; never skipped.

    Stopped with `isrwatch lab down`'s code at the end, which must leave no process running.
    """
    retire_kraft_labs()
    with running_lab(tmp_path_factory.mktemp("lab"), lab_spec) as running:
        yield running


@pytest.fixture(scope="session")
def kraft_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """One real KRaft lab (Kafka 4.4.0) for the session's KRaft tests, started on first use; never skipped. Stopped
    when the ZooKeeper lab starts (its tests run after every KRaft test) or at the end, leaving no process."""
    directory = tmp_path_factory.mktemp("kraft-lab")
    KRAFT_LABS.append(directory)
    with running_lab(directory, kraft_session_spec(project_agent())) as running:
        yield running


@pytest.fixture(scope="session")
def session_stall(lab: Lab) -> Stall:
    """The session's one stall (tests/support/lab.py run_stall), for the lab's and the agent's tests."""
    return run_stall(lab)


@pytest.fixture(scope="session")
def session_restart(lab: Lab) -> Restart:
    """The session's one kill, restart and preferred election (tests/support/lab.py run_restart)."""
    return run_restart(lab)


@pytest.fixture(scope="session")
def streamed(
    lab: Lab, spark, session_stall: Stall, session_restart: Restart, tmp_path_factory: pytest.TempPathFactory
) -> Streamed:
    """Every fault kind run (the tests' own first), then `isrwatch run --profile agent` over all the agents sent;
    the events are kept in the session's base temp dir (`reality-events.jsonl`)."""
    kept = tmp_path_factory.getbasetemp() / "reality-events.jsonl"
    return stream_session(lab, tmp_path_factory.mktemp("session-stream"), kept)


@pytest.fixture(scope="session")
def kraft_streamed(kraft_lab: Lab, spark, tmp_path_factory: pytest.TempPathFactory) -> Streamed:
    """The KRaft lab's every fault kind run (the KRaft tests' own first, fence included), then `isrwatch run --profile
    agent` over all its agents sent; kept in the session's base temp dir (`reality-kraft-events.jsonl`). Its tests
    run after every other KRaft test and before the ZooKeeper lab starts."""
    kept = tmp_path_factory.getbasetemp() / "reality-kraft-events.jsonl"
    workdir = tmp_path_factory.mktemp("kraft-session-stream")
    return stream_session(kraft_lab, workdir, kept, KRAFT_FAULTS, KRAFT_FAULT_LOG)
