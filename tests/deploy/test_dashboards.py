"""Grafana dashboards (deploy/grafana): unique uids, templated datasource, PromQL that parses, exported metrics."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from isrwatch.state.metrics import CATALOGUE
from tests.support.deploy import (
    METRIC,
    RULES,
    alert_rules,
    dashboard_queries,
    dashboards,
    panels,
    run,
    variable_queries,
)

DASHBOARDS = dashboards()
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def test_there_is_a_dashboard_per_topic_with_a_unique_uid() -> None:
    uids = [d.get("uid") for d in DASHBOARDS.values()]
    assert sorted(uids) == ["isrwatch-followers", "isrwatch-propagation", "isrwatch-replication", "isrwatch-stream"]
    for name, dashboard in DASHBOARDS.items():
        ids = [panel["id"] for panel in panels(dashboard)]
        assert len(ids) == len(set(ids)), f"{name}: duplicate panel ids"
        assert all(panel.get("targets") for panel in panels(dashboard)), f"{name}: a panel without a query"


def _datasource_refs(node: object, path: str = "") -> list[tuple[str, object]]:
    """Every `datasource` value anywhere in the dashboard, with where it is."""
    if isinstance(node, dict):
        return [
            ref
            for key, value in node.items()
            for ref in ([(f"{path}.{key}", value)] if key == "datasource" else [])
            + _datasource_refs(value, f"{path}.{key}")
        ]
    if isinstance(node, list):
        return [ref for i, item in enumerate(node) for ref in _datasource_refs(item, f"{path}[{i}]")]
    return []


@pytest.mark.parametrize("name", DASHBOARDS)
def test_datasource_is_a_template_variable(name: str) -> None:
    dashboard = DASHBOARDS[name]
    variables = {var["name"]: var for var in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    refs = _datasource_refs(dashboard["panels"]) + _datasource_refs(dashboard["templating"]["list"])
    assert refs, "no panel names its datasource"
    assert [(where, ref) for where, ref in refs if ref != DATASOURCE] == []


def test_every_dashboard_expression_parses(tmp_path: Path) -> None:
    """promtool parses PromQL when it checks rules: each query becomes a recording rule of a temp file."""
    groups = [
        {
            "name": dashboard["uid"],
            "rules": [
                {"record": f"dashboard:{dashboard['uid'].replace('-', '_')}:query_{i}", "expr": expr}
                for i, (_, expr) in enumerate(dashboard_queries(dashboard))
            ],
        }
        for dashboard in DASHBOARDS.values()
    ]
    rules = tmp_path / "dashboard-queries.rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": groups}))
    proc = run(["promtool", "check", "rules", rules])
    out = proc.stdout + proc.stderr
    assert f"SUCCESS: {sum(len(g['rules']) for g in groups)} rules found" in out


def _used_metrics(source: str) -> dict[str, set[str]]:
    """Metric name -> where it is used, for one dashboard or the alert rules file."""
    if source == RULES.name:
        queries = [(rule["alert"], rule["expr"]) for rule in alert_rules()]
    else:
        dashboard = DASHBOARDS[source]
        queries = dashboard_queries(dashboard) + [("variable", q) for q in variable_queries(dashboard)]
    used: dict[str, set[str]] = {}
    for where, expr in queries:
        for name in METRIC.findall(expr):
            used.setdefault(name, set()).add(where)
    return used


@pytest.mark.parametrize("source", [*DASHBOARDS, RULES.name])
def test_every_metric_used_is_exported_by_the_api(source: str, exported_series: set[str]) -> None:
    used = _used_metrics(source)
    assert used, f"{source} uses no isrwatch metric"
    assert {name: sorted(where) for name, where in used.items() if name not in exported_series} == {}


def test_every_query_of_a_per_cluster_metric_filters_by_the_cluster_variable() -> None:
    """A dashboard with a cluster picker shows only that cluster in every panel (the clock-offset panel too)."""
    per_cluster = {m.exposed for m in CATALOGUE if "cluster" in m.labels}
    for name, dashboard in DASHBOARDS.items():
        variables = {var["name"] for var in dashboard["templating"]["list"]}
        for panel in panels(dashboard):
            for target in panel["targets"]:
                for metric in set(METRIC.findall(target["expr"])) & per_cluster:
                    assert "cluster" in variables, f"{name}: {panel['title']} shows {metric} of every cluster"
                    assert f'{metric}{{cluster=~"$cluster"' in target["expr"], (name, panel["title"], metric)


def test_replication_dashboard_has_broker_and_topic_variables_and_an_incidents_timeline() -> None:
    dashboard = DASHBOARDS["isrwatch-replication.json"]
    assert {"cluster", "broker", "topic"} <= {var["name"] for var in dashboard["templating"]["list"]}
    [timeline] = [p for p in panels(dashboard) if p["type"] == "state-timeline"]
    assert "isrwatch_incidents_open" in timeline["targets"][0]["expr"]
