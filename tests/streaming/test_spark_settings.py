"""The session settings isrwatch asks for: local by default, the submitter's master under spark-submit."""

from __future__ import annotations

import pytest

from isrwatch.cli import build_parser
from isrwatch.streaming.spark import STATE_STORES, SparkSettings


def test_local_master_by_default_and_quiet() -> None:
    conf = SparkSettings().conf()
    assert conf["spark.master"] == "local[2]"
    assert conf["spark.ui.showConsoleProgress"] == "false"
    assert "log4j2.properties" in conf["spark.driver.extraJavaOptions"]


def test_spark_submit_keeps_its_own_master(monkeypatch: pytest.MonkeyPatch) -> None:
    """Launched by spark-submit (k8s cluster mode), forcing local[2] would run the job inside the driver."""
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "40000")
    assert "spark.master" not in SparkSettings().conf()
    assert SparkSettings(master="k8s://https://kubernetes.default.svc:443").conf()["spark.master"].startswith("k8s://")


def test_run_passes_no_master_unless_asked() -> None:
    assert build_parser().parse_args(["run"]).master is None


@pytest.mark.parametrize("name", sorted(STATE_STORES))
def test_state_store_provider_by_name(name: str) -> None:
    assert SparkSettings(state_store=name).conf()["spark.sql.streaming.stateStore.providerClass"] == STATE_STORES[name]
