"""The `run` fixture: each rule test runs through the one-pass replay, the streaming shell without Spark, and
(tests marked `spark_parity`) the real Spark query; all must give the same SPEC §5 outputs."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest

from tests.support.state import Run, run_local, run_spark, run_stateful

RUNNERS = {"local": run_local, "stateful": run_stateful}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "run" in metafunc.fixturenames:
        params = list(RUNNERS)
        if metafunc.definition.get_closest_marker("spark_parity"):
            params.append(pytest.param("spark", marks=pytest.mark.spark))
        metafunc.parametrize("run", params, indirect=True)


@pytest.fixture
def run(request: pytest.FixtureRequest, tmp_path: Path) -> Run:
    if request.param == "spark":
        request.getfixturevalue("spark")  # the session's Spark, started once
        return partial(run_spark, tmp=tmp_path)
    return RUNNERS[request.param]
