"""Fixtures shared by every test room: one Spark session, a private PostgreSQL server, a store URL on each
backend, and two real Kafka labs for the session, one after the other: a KRaft lab (Kafka 4.4.0, 3 combined
nodes, a monitor node) and a ZooKeeper lab (ZooKeeper, 3 brokers, a monitor broker) with its shared fault runs and
the one stream over its events topic, and the KRaft lab's own stream (tests/support/lab.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from isrwatch.lab.config import LabSpec
from isrwatch.lab.record import Lab
from tests.support.lab import (
    KRAFT_FAULT_LOG,
    KRAFT_FAULTS,
    KRAFT_LABS,
    ZOOKEEPER_LABS,
    Restart,
    Stall,
    Streamed,
    kraft_session_spec,
    project_agent,
    retire_kraft_labs,
    retire_labs,
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
# `make test` runs the suite on two pytest-xdist workers (`-n 2 --dist loadscope`, scheduled by Rooms below). The
# tests of these modules share the session's labs: one worker runs them all, in this file's order, so the run starts
# one real cluster per mode while the other worker runs the rest.
LAB_MODULES = {
    "tests/agent/test_agent_on_lab.py",
    "tests/cli/test_demo_real.py",
    "tests/cli/test_simulate.py",
    "tests/lab/test_kraft.py",
    "tests/lab/test_lab.py",
    "tests/reality/test_reality.py",
    "tests/reality/test_reality_kraft.py",
    "tests/streaming/test_kafka.py",
    "tests/streaming/test_kafka_clock.py",
    "tests/streaming/test_skewed_broker_on_kafka.py",
}
# The tests of these modules share a module-scoped fixture (a standalone Spark cluster, a built wheel, a recording
# replayed into a store): one worker runs each module, so the fixture is built once.
MODULE_FIXTURE_MODULES = {
    "tests/api/test_alter_partitions.py",
    "tests/api/test_incidents.py",
    "tests/api/test_metrics.py",
    "tests/cli/test_wheel.py",
    "tests/deploy/test_prometheus_e2e.py",
    "tests/state/test_agent_recording.py",
    "tests/state/test_incidents.py",
    "tests/state/test_kraft_recording.py",
    "tests/streaming/test_standalone_cluster.py",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests on the Kafka labs run last: a lab (four brokers, ZooKeeper or a quorum, a producer: about half a core)
    is started on first use and runs until the session ends (the KRaft lab: until the ZooKeeper lab starts), so
    every other test runs before either exists. The KRaft lab's tests come first, then the ZooKeeper lab's. Tests on
    the session's stream (the agent's tests, the reality suite) run after every other lab test: it covers the faults
    they ran (tests/support/lab.py FAULT_LOG). A lab test or a module-scoped fixture outside the modules listed
    above is refused: it would start a second lab, or build its fixture twice, under `make test`."""

    def order(item: pytest.Item) -> tuple[bool, bool, bool]:
        uses = getattr(item, "fixturenames", ())
        return "kraft_lab" in uses or "lab" in uses, "lab" in uses, "streamed" in uses or "kraft_streamed" in uses

    items.sort(key=order)
    for item in items:
        module = _module(item)
        if LAB_FIXTURES & set(getattr(item, "fixturenames", ())) and module not in LAB_MODULES:
            raise pytest.UsageError(f"{item.nodeid} uses a session lab: add {module} to tests/conftest.py LAB_MODULES")
        info = getattr(item, "_fixtureinfo", None)
        scopes = {d.scope for chain in (info.name2fixturedefs.values() if info else ()) for d in chain}
        if "module" in scopes and module not in LAB_MODULES | MODULE_FIXTURE_MODULES:
            raise pytest.UsageError(
                f"{item.nodeid} has a module-scoped fixture: add {module} to tests/conftest.py MODULE_FIXTURE_MODULES"
            )


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """`--dist loadscope` with the scopes above: the lab modules one scope, each module of MODULE_FIXTURE_MODULES one,
    every other test its own (pytest-xdist's own `loadgroup` cannot mark groups under pytest 9.2's node ids)."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Rooms(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            if module in LAB_MODULES:
                return "labs"
            return module if module in MODULE_FIXTURE_MODULES else nodeid

    return Rooms(config, log)


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After the last lab module's test on a worker that runs other tests next, stop the labs: not needed again."""
    if nextitem is not None and _module(item) in LAB_MODULES and _module(nextitem) not in LAB_MODULES:
        retire_labs()


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


# Seconds of setup, call and teardown per xdist worker, split into the labs' scope and the rest (the controller
# hears every report): the suite's wall time is its busier worker's, so this says where to balance next.
WORKER_SECONDS: Counter[tuple[str, bool]] = Counter()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    node = getattr(report, "node", None)
    if node is not None:
        WORKER_SECONDS[node.gateway.id, report.nodeid.split("::", 1)[0] in LAB_MODULES] += report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for worker in sorted({w for w, _ in WORKER_SECONDS}):
        labs, rest = WORKER_SECONDS[worker, True], WORKER_SECONDS[worker, False]
        terminalreporter.write_line(f"worker {worker}: {labs + rest:.0f} s of tests ({labs:.0f} s on the labs)")


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
    directory = tmp_path_factory.mktemp("lab")
    ZOOKEEPER_LABS.append(directory)
    with running_lab(directory, lab_spec) as running:
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
