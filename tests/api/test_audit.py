"""/v1/observed and /v1/divergences, over a store `isrwatch replay --store --profile agent` wrote from agent events.

Cluster "a" tells the timing story of tests/state/test_audit.py (the broker's clock read decided a shrink
2 ms before the model's limit), cluster "b" the story of a shrink and batch the broker never made.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from isrwatch.api.app import create_app
from isrwatch.api.models import DivergencePage, ObservedPage
from isrwatch.cli import main as isrwatch
from tests.support.audit import END, agent_events
from tests.support.fleet import pages
from tests.support.pg import store_url


@pytest.fixture(params=["sqlite", "postgresql"])
def audited(request: pytest.FixtureRequest, tmp_path: Path) -> TestClient:
    url = store_url(request, tmp_path / "audit.db")
    events = tmp_path / "agent.jsonl"
    events.write_text("".join(json.dumps(ev) + "\n" for ev in agent_events()))
    argv = ["replay", str(events), "--profile", "agent", "--set", "replica_lag_time_max_ms=10000", "--store", url]
    assert isrwatch([*argv, "--until", str(END)]) == 0
    with TestClient(create_app(url)) as client:
        yield client


def test_observed_lists_what_the_brokers_did_newest_first(audited: TestClient) -> None:
    got = pages(audited, "/v1/observed", "observed", 1)
    assert [(o["cluster"], o["type"], o["ts"]) for o in got] == [
        ("a", "isr_change_propagated", 17_500),
        ("a", "isr_updated", 11_520),
    ]
    assert got[1]["out_of_sync"][0]["replica"] == 3 and got[1]["check_ms"] == 11_502
    ObservedPage.model_validate(audited.get("/v1/observed").json())
    only = audited.get("/v1/observed", params={"type": "isr_updated", "topic": "t", "partition": 0, "broker": 1})
    assert [o["ts"] for o in only.json()["observed"]] == [11_520]
    assert audited.get("/v1/observed", params={"cluster": "b"}).json()["observed"] == []


def test_divergences_filter_by_kind_subject_and_cluster(audited: TestClient) -> None:
    got = pages(audited, "/v1/divergences", "divergences", 1)
    assert sorted((d["cluster"], d["subject"], d["kind"]) for d in got) == [
        ("a", "isr", "timing"),
        ("a", "propagation", "timing"),
        ("a", "propagation", "timing"),
        ("b", "isr", "unexplained_by_model"),
        ("b", "propagation", "unexplained_by_model"),
    ]
    assert [d["ts"] for d in got] == sorted((d["ts"] for d in got), reverse=True)
    DivergencePage.model_validate(audited.get("/v1/divergences").json())
    real = audited.get("/v1/divergences", params={"kind": "unexplained_by_model", "subject": "isr"}).json()
    [d] = real["divergences"]
    assert (d["cluster"], d["topic"], d["partition"], d["margin_ms"]) == ("b", "t", 0, 3500)
    assert d["evidence"] == [{"replica": 3, "leo": 100, "last_caught_up_ms": 1500, "last_fetch_ms": 1500}]
    assert audited.get("/v1/divergences", params={"kind": "nonsense"}).status_code == 422


def test_a_timing_divergence_names_its_cause_and_the_list_filters_by_it(audited: TestClient) -> None:
    got = pages(audited, "/v1/divergences", "divergences", 1)
    assert sorted((d["cluster"], d["subject"], d["kind"], d["cause"]) for d in got) == [
        ("a", "isr", "timing", "margin"),
        ("a", "propagation", "timing", "shifted"),
        ("a", "propagation", "timing", "shifted"),
        ("b", "isr", "unexplained_by_model", None),
        ("b", "propagation", "unexplained_by_model", None),
    ]
    shifted = audited.get("/v1/divergences", params={"cause": "shifted"}).json()["divergences"]
    assert [(d["subject"], d["ts"]) for d in shifted] == [("propagation", 22_500), ("propagation", 17_500)]
    [margin] = audited.get("/v1/divergences", params={"cause": "margin", "cluster": "a"}).json()["divergences"]
    assert (margin["topic"], margin["partition"], margin["margin_ms"]) == ("t", 0, 2)
    assert audited.get("/v1/divergences", params={"cause": "split"}).json()["divergences"] == []
    assert audited.get("/v1/divergences", params={"cause": "nonsense"}).status_code == 422


def test_divergences_are_counted_for_prometheus(audited: TestClient) -> None:
    text = audited.get("/metrics").text
    # cluster a: 3 timing (1 margin, 2 shifted); cluster b: 2 unexplained_by_model, with no cause
    assert 'isrwatch_divergences_total{cause="margin",cluster="a",kind="timing"} 1.0' in text
    assert 'isrwatch_divergences_total{cause="shifted",cluster="a",kind="timing"} 2.0' in text
    assert 'isrwatch_divergences_total{cause="",cluster="b",kind="unexplained_by_model"} 2.0' in text


def test_metrics_serve_each_timing_margin_as_a_histogram_by_cause(audited: TestClient) -> None:
    """`isrwatch_timing_divergence_margin_seconds{cluster,cause}` (SPEC §7, CONTRACTS.md): one observation per timing
    divergence, the size of its margin in seconds, tallied by the store when it wrote the divergence."""
    from prometheus_client.parser import text_string_to_metric_families

    timing = [d for d in pages(audited, "/v1/divergences", "divergences", 1) if d["kind"] == "timing"]
    [family] = [
        f for f in text_string_to_metric_families(audited.get("/metrics").text)
        if f.name == "isrwatch_timing_divergence_margin_seconds"
    ]  # fmt: skip
    served = {(s.name.rpartition("_")[2], s.labels["cause"], s.labels.get("le")): s.value for s in family.samples}
    for cause in {d["cause"] for d in timing}:
        margins = [abs(d["margin_ms"]) / 1000 for d in timing if d["cause"] == cause]
        assert served[("count", cause, None)] == len(margins)
        assert served[("sum", cause, None)] == pytest.approx(sum(margins))
        assert served[("bucket", cause, "0.01")] == sum(m <= 0.01 for m in margins)
    assert {cause for _, cause, _ in served} == {"margin", "shifted"}
