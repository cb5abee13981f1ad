"""/v1/partitions: every page and filter, one partition, its ISR and history, against the engine's records."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

from isrwatch.api.app import create_app
from tests.support.fleet import NOW, OFFLINE, REELECTED, Streamed, follower_shrink_predicted, key, pages, state_record


def test_partitions_all_in_stable_order_acrosspages(client: TestClient, fleet: Streamed) -> None:
    got = pages(client, "/v1/partitions", "partitions", 5)
    assert [key(p) for p in got] == [key(s) for s in fleet.states]
    first = client.get("/v1/partitions", params={"page_size": 5}).json()
    assert first["as_of_ms"] == NOW
    assert [key(p) for p in first["partitions"]] == [key(s) for s in fleet.states[:5]]


FILTERS: dict[str, tuple[dict, Callable[[dict], bool]]] = {
    "cluster": ({"cluster": "west"}, lambda s: s["cluster"] == "west"),
    "topic": ({"topic": "topic-1"}, lambda s: s["topic"] == "topic-1"),
    "broker": ({"broker": 5}, lambda s: 5 in s["replicas"]),
    "broker+cluster": ({"broker": 2, "cluster": "east"}, lambda s: 2 in s["replicas"] and s["cluster"] == "east"),
    "under_replicated": ({"state": "under_replicated"}, lambda s: s["under_replicated"]),
    "under_min_isr": ({"state": "under_min_isr"}, lambda s: s["under_min_isr"]),
    "at_min_isr": ({"state": "at_min_isr"}, lambda s: s["at_min_isr"]),
    "offline": ({"state": "offline"}, lambda s: s["offline"]),
    "shrink_predicted": (
        {"state": "shrink_predicted"},
        lambda s: any(follower_shrink_predicted(f, NOW, None) for f in s["followers"]),
    ),
    "topic+state": (
        {"topic": "topic-1", "state": "under_replicated"},
        lambda s: s["topic"] == "topic-1" and s["under_replicated"],
    ),
}


@pytest.mark.parametrize("name", FILTERS)
def test_partition_filters(client: TestClient, fleet: Streamed, name: str) -> None:
    params, keep = FILTERS[name]
    expected = [key(s) for s in fleet.states if keep(s)]
    assert expected, f"the fleet has nothing for {name}"
    assert len(expected) < len(fleet.states)
    assert [key(p) for p in pages(client, "/v1/partitions", "partitions", 2, **params)] == expected


def test_partition_summary_reads_like_cruise_control(client: TestClient, fleet: Streamed) -> None:
    body = client.get("/v1/partitions", params={"cluster": "east", "state": "offline"}).json()
    [summary] = body["partitions"]
    state = state_record(fleet, "east", *OFFLINE)
    assert summary["leader"] == -1 and summary["offline"] is True
    assert summary["replicas"] == state["replicas"]
    assert summary["in-sync"] == [] and summary["out-of-sync"] == state["replicas"]
    shrunk = client.get("/v1/partitions", params={"state": "at_min_isr", "page_size": 1}).json()["partitions"][0]
    assert sorted(shrunk["in-sync"] + shrunk["out-of-sync"]) == sorted(shrunk["replicas"])
    assert len(shrunk["out-of-sync"]) == 1


def test_partition_detail_has_every_follower_judged_at_the_watermark(client: TestClient, fleet: Streamed) -> None:
    near = [(s, f) for s in fleet.states for f in s["followers"] if follower_shrink_predicted(f, NOW, None)]
    state, follower = near[0]
    r = client.get(f"/v1/partitions/{state['topic']}/{state['partition']}", params={"cluster": state["cluster"]})
    assert r.status_code == 200
    body = r.json()
    assert body["as_of_ms"] == NOW and body["shrink_predicted"] is True
    for field in (
        "leader",
        "leader_epoch",
        "controller_epoch",
        "partition_epoch",
        "replicas",
        "isr",
        "hw",
        "leader_leo",
        "leader_epoch_start_offset",
        "under_replicated",
        "under_min_isr",
        "at_min_isr",
    ):
        assert body[field] == state[field], field
    got = next(f for f in body["followers"] if f["replica"] == follower["replica"])
    assert got["time_since_caught_up_ms"] == NOW - follower["last_caught_up_ms"]
    assert got["shrink_predicted"] is True and got["in_sync"] is True
    assert got["shrink_eligible_at_ms"] == follower["shrink_eligible_at_ms"]
    assert got["predicted_shrink_at_ms"] == follower["predicted_shrink_at_ms"] > NOW
    assert got["lag_offsets"] == follower["lag_offsets"] > 0
    assert {f["replica"] for f in body["followers"]} == {f["replica"] for f in state["followers"]}


def test_partition_lookup_needs_the_cluster_only_when_ambiguous(client: TestClient) -> None:
    both = client.get("/v1/partitions/topic-0/0")  # topic-0/0 exists in east and west
    assert both.status_code == 422
    assert both.json() == {
        "error": "invalid_parameter",
        "detail": "cluster: partition topic-0-0 exists in clusters east, west; name one",
    }
    only_east = client.get("/v1/partitions/topic-2/5")  # west has two topics only
    assert only_east.status_code == 200 and only_east.json()["cluster"] == "east"
    assert client.get("/v1/partitions/topic-0/0", params={"cluster": "west"}).json()["cluster"] == "west"
    for path in (
        "/v1/partitions/topic-0/999",
        "/v1/partitions/topic-2/5?cluster=west",
        "/v1/partitions/nope/0/isr",
        "/v1/partitions/nope/0/history",
    ):
        r = client.get(path)
        assert r.status_code == 404, path
        assert r.json()["error"] == "not_found" and "not found" in r.json()["detail"]


def test_isr_is_leader_epoch_isr_and_elr_only(client: TestClient, fleet: Streamed) -> None:
    """The ELR is KRaft's: a ZooKeeper-mode partition's answer has no `elr` key (its keys are as they were)."""
    state = state_record(fleet, "east", *REELECTED)
    body = client.get(f"/v1/partitions/{REELECTED[0]}/{REELECTED[1]}/isr", params={"cluster": "east"}).json()
    assert body == {
        "cluster": "east",
        "topic": REELECTED[0],
        "partition": REELECTED[1],
        "leader": state["leader"],
        "leader_epoch": 1,
        "isr": state["isr"],
    }
    assert client.get(f"/v1/partitions/{REELECTED[0]}/{REELECTED[1]}/isr").json() == body


def test_history_is_the_partitions_decisions_newest_first(client: TestClient, fleet: Streamed) -> None:
    got = pages(client, f"/v1/partitions/{REELECTED[0]}/{REELECTED[1]}/history", "decisions", 2)
    expected = [d for d in fleet.decisions if key(d) == ("east", *REELECTED)]
    assert [d["kind"] for d in got] == ["rejected", "expand", "expand", "leader_and_isr", "leader_and_isr"]
    assert sorted(map(str, got)) == sorted(map(str, expected))
    assert [d["ts"] for d in got] == sorted((d["ts"] for d in expected), reverse=True)


@pytest.mark.parametrize("window_ms", [0, 20_000])
def test_the_shrink_window_is_configurable(fleet_store: tuple[str, Streamed], window_ms: int) -> None:
    url, fleet = fleet_store
    expected = [
        key(s) for s in fleet.states if any(follower_shrink_predicted(f, NOW, window_ms) for f in s["followers"])
    ]
    with TestClient(create_app(url, shrink_window_ms=window_ms)) as client:
        got = client.get("/v1/partitions", params={"state": "shrink_predicted"}).json()["partitions"]
        assert [key(p) for p in got] == expected
        assert all(p["shrink_predicted"] for p in got)
    # West's two stuck/slow followers: one already past its limit (any window), one 758 ms before it.
    assert len(expected) == {0: 1, 20_000: 2}[window_ms]
