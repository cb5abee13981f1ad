"""/v1/incidents, /v1/incidents/{id} and /v1/timeline over a store `isrwatch replay --store` wrote (SQLite and
PostgreSQL), from the story of tests/state/test_incidents.py: broker 2 stalls, broker 4 goes down, a new controller."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from isrwatch.api.app import create_app
from isrwatch.api.models import IncidentDetail, IncidentPage, Timeline
from isrwatch.cli import main as isrwatch
from tests.support.fleet import pages
from tests.support.incidents import CONFIG, story
from tests.support.pg import store_url


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def told(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> TestClient:
    tmp = tmp_path_factory.mktemp("incidents")
    url = store_url(request, tmp / "incidents.db")
    events = tmp / "story.jsonl"
    events.write_text("".join(json.dumps(ev) + "\n" for ev in story()))
    sets = [arg for key, value in CONFIG.items() for arg in ("--set", f"{key}={value}")]
    assert isrwatch(["replay", str(events), *sets, "--store", url]) == 0
    with TestClient(create_app(url)) as client:
        yield client


def test_incidents_list_newest_first_and_page(told: TestClient) -> None:
    got = pages(told, "/v1/incidents", "incidents", 1)
    assert [(i["kind"], i["brokers"], i["opened_ms"], i["closed_ms"]) for i in got] == [
        ("controller", [], 100_000, 100_000),
        ("offline", [4], 60_000, 80_000),
        ("stuck", [2], 35_000, 46_000),
    ]
    assert "partitions" not in got[0] and "decisions" not in got[0] and "last_ms" not in got[0]
    IncidentPage.model_validate(told.get("/v1/incidents").json())


@pytest.mark.parametrize(
    ("params", "kinds"),
    [
        ({"kind": "stuck"}, ["stuck"]),
        ({"broker": 4}, ["offline"]),
        ({"broker": 2}, ["stuck"]),
        ({"open": "true"}, []),
        ({"open": "false"}, ["controller", "offline", "stuck"]),
        ({"since": 50_000}, ["controller", "offline"]),
        ({"cluster": "default", "kind": "offline"}, ["offline"]),
        ({"cluster": "other"}, []),
    ],
)
def test_incidents_filter(told: TestClient, params: dict, kinds: list[str]) -> None:
    answer = told.get("/v1/incidents", params=params)
    assert answer.status_code == 200, answer.text
    assert [i["kind"] for i in answer.json()["incidents"]] == kinds


def test_an_incident_with_its_partitions_intervals_and_decisions(told: TestClient) -> None:
    stuck = told.get("/v1/incidents", params={"kind": "stuck"}).json()["incidents"][0]
    detail = told.get(f"/v1/incidents/{stuck['id']}").json()
    IncidentDetail.model_validate(detail)
    assert {k: v for k, v in detail.items() if k not in ("partitions", "decisions")} == stuck
    v0 = next(p for p in detail["partitions"] if p["topic"] == "v")
    assert v0 == {
        "topic": "v",
        "partition": 0,
        "worst": "under_min_isr",
        "intervals": [{"state": "under_min_isr", "start_ms": 35_000, "end_ms": 46_000}],
    }
    assert sorted(d["kind"] for d in detail["decisions"]) == ["expand"] * 4 + ["shrink"] * 4
    assert "NOT_ENOUGH_REPLICAS" in detail["summary"]


def test_unknown_or_malformed_incident_ids(told: TestClient) -> None:
    assert told.get("/v1/incidents/stuck-0000000000000000").status_code == 404
    assert told.get("/v1/incidents/Stuck!").status_code == 422
    assert told.get("/v1/incidents", params={"kind": "bogus"}).status_code == 422


def test_the_timeline_defaults_to_the_last_15_minutes_of_settled_time(told: TestClient) -> None:
    body = told.get("/v1/timeline").json()
    Timeline.model_validate(body)
    assert body["cluster"] == "default" and body["until"] > 100_000 and body["since"] == 0
    assert [(c["ts"], c["under_replicated"], c["under_min_isr"]) for c in body["counts"]] == [
        (35_000, 4, 1),
        (46_000, 0, 0),
        (60_000, 3, 0),
        (80_000, 0, 0),
    ]
    lanes = {lane["broker"]: lane["intervals"] for lane in body["brokers"]}
    assert {"kind": "out_of_sync", "start_ms": 35_000, "end_ms": 46_000, "partitions": 4} in lanes[2]
    assert {"kind": "offline", "start_ms": 60_000, "end_ms": 80_000, "partitions": 3} in lanes[4]
    assert [m["kind"] for m in body["markers"]].count("shrink") == 4
    assert [i["kind"] for i in body["incidents"]] == ["stuck", "offline", "controller"]


def test_the_timeline_between_since_and_until(told: TestClient) -> None:
    body = told.get("/v1/timeline", params={"cluster": "default", "since": 50_000, "until": 70_000}).json()
    assert [(c["ts"], c["under_replicated"]) for c in body["counts"]] == [(50_000, 0), (60_000, 3)]
    assert sorted(lane["broker"] for lane in body["brokers"]) == [4]
    assert [i["kind"] for i in body["incidents"]] == ["offline"]
    assert all(50_000 <= m["ts"] <= 70_000 for m in body["markers"])
    bad = told.get("/v1/timeline", params={"since": 70_000, "until": 50_000})
    assert bad.status_code == 422 and bad.json()["detail"].startswith("since")


def test_metrics_count_incidents_opened_and_open(told: TestClient) -> None:
    scrape = told.get("/metrics").text
    for kind in ("stuck", "offline", "controller"):
        assert f'isrwatch_incidents_total{{cluster="default",kind="{kind}"}} 1.0' in scrape
    assert "isrwatch_incidents_open{" not in scrape  # every incident of the story closed
    assert "# TYPE isrwatch_incidents_open gauge" in scrape
    assert "# TYPE isrwatch_incidents_open_under_min_isr gauge" in scrape
