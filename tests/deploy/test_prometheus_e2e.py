"""End to end: Debian's Prometheus server scrapes the real API and answers every dashboard query with data."""

from __future__ import annotations

import math
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest
import yaml

from tests.support.deploy import (
    RULES,
    alert_rules,
    commit_demo_batch,
    dashboard_queries,
    dashboards,
    variable_queries,
    wait_until,
)
from tests.support.net import free_port

PROMETHEUS = "/usr/bin/prometheus"
DEMO_ROWS = 661  # input rows of one demo batch


@pytest.fixture(scope="module")
def prometheus(api_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """A private Prometheus on a free loopback port with the alert rules loaded, scraping the API every second
    as two replicas would be scraped (same series, another `pod` label)."""
    tmp_path = tmp_path_factory.mktemp("prometheus")
    config = tmp_path / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(RULES)],
                "scrape_configs": [
                    {
                        "job_name": "isrwatch",
                        "static_configs": [
                            {"targets": [api_url.removeprefix("http://")], "labels": {"pod": pod}}
                            for pod in ("isrwatch-api-0", "isrwatch-api-1")
                        ],
                    }
                ],
            }
        )
    )
    port = free_port()
    log = tmp_path / "prometheus.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5)

    def ready() -> bool:
        assert proc.poll() is None, f"prometheus exited {proc.returncode}:\n{log.read_text()[-3000:]}"
        return client.get("/-/ready").status_code == 200

    try:
        wait_until(ready, 30, "prometheus to start")
        yield client
    finally:
        client.close()
        proc.terminate()
        proc.wait(timeout=15)


def _query(client: httpx.Client, promql: str) -> list[dict]:
    body = client.get("/api/v1/query", params={"query": promql}).json()
    assert body["status"] == "success", f"{promql}: {body}"
    return body["data"]["result"]


def _value(client: httpx.Client, promql: str) -> float | None:
    result = _query(client, promql)
    return float(result[0]["value"][1]) if result else None


def test_every_dashboard_query_returns_data_through_prometheus(prometheus: httpx.Client, demo_store: str) -> None:
    wait_until(
        lambda: (_value(prometheus, 'min(sum_over_time(up{job="isrwatch"}[1m]))') or 0) >= 2,
        30,
        "two successful scrapes of each replica",
    )
    # The stream commits another batch: every counter rises, so rates and quantiles have something to show.
    commit_demo_batch(demo_store, int(time.time() * 1000))
    wait_until(
        lambda: (_value(prometheus, "isrwatch_stream_input_rows_total") or 0) >= 2 * DEMO_ROWS,
        30,
        "the second batch in Prometheus",
    )

    empty = {}
    for dashboard in dashboards().values():
        for where, promql in dashboard_queries(dashboard):
            values = [float(series["value"][1]) for series in _query(prometheus, promql)]
            if not values or not all(math.isfinite(v) for v in values):
                empty[where] = (promql, values)
        for variable in variable_queries(dashboard):
            metric, label = variable.removeprefix("label_values(").removesuffix(")").split(", ")
            match = metric.replace("$cluster", ".+")  # as Grafana would, with every cluster chosen
            found = prometheus.get(f"/api/v1/label/{label}/values", params={"match[]": match}).json()["data"]
            # the cluster variable lists both demo clusters; a broker, topic or replica variable lists some values
            if (found != ["demo", "kraft"]) if label == "cluster" else not found:
                empty[f"{dashboard['uid']} variable {variable}"] = (variable, found)
    assert empty == {}


def test_alert_rules_evaluate_cleanly_against_the_api_metrics(prometheus: httpx.Client) -> None:
    def evaluated() -> list[dict]:
        groups = prometheus.get("/api/v1/rules").json()["data"]["groups"]
        rules = [rule for group in groups for rule in group["rules"]]
        return rules if rules and all(rule["health"] != "unknown" for rule in rules) else []

    rules = wait_until(evaluated, 30, "every alert rule to be evaluated")
    assert {rule["name"]: (rule["health"], rule.get("lastError", "")) for rule in rules if rule["health"] != "ok"} == {}
    assert sorted(rule["name"] for rule in rules) == sorted(rule["alert"] for rule in alert_rules())


# The demo store's partition counts (tests/deploy/data/demo.events.jsonl, min.insync.replicas 2), plus the KRaft
# cluster's 4 partitions (tests/support/kraft.py), whose committed ISRs are full.
DEMO_COUNTS = {
    "isrwatch-replication / Partitions / A": 6 + 4,
    "isrwatch-replication / Under-replicated / A": 4,
    "isrwatch-replication / Under min ISR / A": 2,
    "isrwatch-replication / At min ISR / A": 3,
    "isrwatch-replication / Offline / A": 1,
    "isrwatch-followers / Followers predicted to shrink / A": 1,
}


def test_counts_are_not_multiplied_by_api_replicas(prometheus: httpx.Client) -> None:
    wait_until(lambda: (_value(prometheus, 'count(up{job="isrwatch"} == 1)') or 0) == 2, 30, "both replicas up")
    queries = {
        where: promql
        for dashboard in dashboards().values()
        for where, promql in dashboard_queries(dashboard)
        if where in DEMO_COUNTS
    }
    assert {where: _value(prometheus, promql) for where, promql in queries.items()} == DEMO_COUNTS
