"""Every endpoint and filter over the fleet store (SQLite and PostgreSQL), checked against the engine's records."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from state.store import follower_shrink_predicted
from tests.api.fleet import END, OFFLINE, REELECTED, S, Streamed

NOW = END + 1  # the last batch's watermark: event-time "now" for every derived value


def _key(r: dict) -> tuple:
    return (r["cluster"], r["topic"], r["partition"])


def _pages(client: TestClient, path: str, field: str, page_size: int, **params) -> list[dict]:
    """Follow next_page_token to the end; every page but the last is full."""
    items: list[dict] = []
    token = None
    while True:
        query = {**params, "page_size": page_size, **({"page_token": token} if token else {})}
        body = client.get(path, params=query).json()
        items += body[field]
        token = body["next_page_token"]
        if token is None:
            return items
        assert len(body[field]) == page_size


def _state(fleet: Streamed, cluster: str, topic: str, partition: int) -> dict:
    return next(s for s in fleet.states if _key(s) == (cluster, topic, partition))


def test_partitions_all_in_stable_order_across_pages(client: TestClient, fleet: Streamed) -> None:
    got = _pages(client, "/v1/partitions", "partitions", 5)
    assert [_key(p) for p in got] == [_key(s) for s in fleet.states]
    first = client.get("/v1/partitions", params={"page_size": 5}).json()
    assert first["as_of_ms"] == NOW
    assert [_key(p) for p in first["partitions"]] == [_key(s) for s in fleet.states[:5]]


FILTERS: dict[str, tuple[dict, Callable[[dict], bool]]] = {
    "cluster": ({"cluster": "west"}, lambda s: s["cluster"] == "west"),
    "topic": ({"topic": "topic-1"}, lambda s: s["topic"] == "topic-1"),
    "broker": ({"broker": 5}, lambda s: 5 in s["replicas"]),
    "broker+cluster": ({"broker": 2, "cluster": "east"}, lambda s: 2 in s["replicas"] and s["cluster"] == "east"),
    "under_replicated": ({"state": "under_replicated"}, lambda s: s["under_replicated"]),
    "under_min_isr": ({"state": "under_min_isr"}, lambda s: s["under_min_isr"]),
    "at_min_isr": ({"state": "at_min_isr"}, lambda s: s["at_min_isr"]),
    "offline": ({"state": "offline"}, lambda s: s["offline"]),
    "shrink_predicted": ({"state": "shrink_predicted"},
                         lambda s: any(follower_shrink_predicted(f, NOW, None) for f in s["followers"])),
    "topic+state": ({"topic": "topic-1", "state": "under_replicated"},
                    lambda s: s["topic"] == "topic-1" and s["under_replicated"]),
}


@pytest.mark.parametrize("name", FILTERS)
def test_partition_filters(client: TestClient, fleet: Streamed, name: str) -> None:
    params, keep = FILTERS[name]
    expected = [_key(s) for s in fleet.states if keep(s)]
    assert expected, f"the fleet has nothing for {name}"
    assert len(expected) < len(fleet.states)
    assert [_key(p) for p in _pages(client, "/v1/partitions", "partitions", 2, **params)] == expected


def test_partition_summary_reads_like_cruise_control(client: TestClient, fleet: Streamed) -> None:
    body = client.get("/v1/partitions", params={"cluster": "east", "state": "offline"}).json()
    [summary] = body["partitions"]
    state = _state(fleet, "east", *OFFLINE)
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
    for field in ("leader", "leader_epoch", "controller_epoch", "partition_epoch", "replicas", "isr", "hw",
                  "leader_leo", "leader_epoch_start_offset", "under_replicated", "under_min_isr", "at_min_isr"):
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
    assert both.json() == {"error": "invalid_parameter",
                           "detail": "cluster: partition topic-0-0 exists in clusters east, west; name one"}
    only_east = client.get("/v1/partitions/topic-2/5")  # west has two topics only
    assert only_east.status_code == 200 and only_east.json()["cluster"] == "east"
    assert client.get("/v1/partitions/topic-0/0", params={"cluster": "west"}).json()["cluster"] == "west"
    for path in ("/v1/partitions/topic-0/999", "/v1/partitions/topic-2/5?cluster=west", "/v1/partitions/nope/0/isr",
                 "/v1/partitions/nope/0/history"):
        r = client.get(path)
        assert r.status_code == 404, path
        assert r.json()["error"] == "not_found" and "not found" in r.json()["detail"]


def test_isr_is_leader_epoch_and_isr_only(client: TestClient, fleet: Streamed) -> None:
    state = _state(fleet, "east", *REELECTED)
    body = client.get(f"/v1/partitions/{REELECTED[0]}/{REELECTED[1]}/isr", params={"cluster": "east"}).json()
    assert body == {"cluster": "east", "topic": REELECTED[0], "partition": REELECTED[1], "leader": state["leader"],
                    "leader_epoch": 1, "isr": state["isr"]}
    assert client.get(f"/v1/partitions/{REELECTED[0]}/{REELECTED[1]}/isr").json() == body


def test_history_is_the_partitions_decisions_newest_first(client: TestClient, fleet: Streamed) -> None:
    got = _pages(client, f"/v1/partitions/{REELECTED[0]}/{REELECTED[1]}/history", "decisions", 2)
    expected = [d for d in fleet.decisions if _key(d) == ("east", *REELECTED)]
    assert [d["kind"] for d in got] == ["rejected", "expand", "expand", "leader_and_isr", "leader_and_isr"]
    assert sorted(map(str, got)) == sorted(map(str, expected))
    assert [d["ts"] for d in got] == sorted((d["ts"] for d in expected), reverse=True)


@pytest.mark.parametrize("params,keep", [
    ({}, lambda d: True),
    ({"kind": "shrink"}, lambda d: d["kind"] == "shrink"),
    ({"kind": "expand", "cluster": "east"}, lambda d: d["kind"] == "expand"),
    ({"topic": "topic-1"}, lambda d: d["topic"] == "topic-1"),
    ({"broker": 0}, lambda d: d["leader"] == 0 or 0 in d["replicas_changed"]),
    ({"since": S + 15_000}, lambda d: d["ts"] >= S + 15_000),
    ({"since": S + 15_000, "kind": "leader_and_isr"},
     lambda d: d["ts"] >= S + 15_000 and d["kind"] == "leader_and_isr"),
])
def test_decisions_filters(client: TestClient, fleet: Streamed, params: dict, keep: Callable) -> None:
    expected = [d for d in fleet.decisions if keep(d)]
    got = _pages(client, "/v1/decisions", "decisions", 10, **params)
    assert sorted(map(str, got)) == sorted(map(str, expected))
    assert [d["ts"] for d in got] == sorted((d["ts"] for d in got), reverse=True)


@pytest.mark.parametrize("params,keep", [
    ({}, lambda p: True),
    ({"broker": 2}, lambda p: p["broker"] == 2),
    ({"topic": "topic-2"}, lambda p: any(tp["topic"] == "topic-2" for tp in p["partitions"])),
    ({"trigger": "linger"}, lambda p: p["trigger"] == "linger"),
    ({"trigger": "max_delay"}, lambda p: p["trigger"] == "max_delay"),
    ({"since": S + 22_501}, lambda p: p["ts"] >= S + 22_501),
    ({"cluster": "west"}, lambda p: p["cluster"] == "west"),
])
def test_propagations_filters(client: TestClient, fleet: Streamed, params: dict, keep: Callable) -> None:
    expected = [p for p in fleet.propagations if keep(p)]
    got = _pages(client, "/v1/propagations", "propagations", 1, **params)
    assert sorted(map(str, got)) == sorted(map(str, expected))


def test_brokers_list(client: TestClient, fleet: Streamed) -> None:
    body = client.get("/v1/brokers").json()
    assert body["as_of_ms"] == NOW
    brokers = {(b["cluster"], b["broker"]): b for b in body["brokers"]}
    assert set(brokers) == {(s["cluster"], r) for s in fleet.states for r in s["replicas"]}
    for (cluster, broker), b in brokers.items():
        hosted = [s for s in fleet.states if s["cluster"] == cluster and broker in s["replicas"]]
        assert b["replicas"] == len(hosted)
        assert b["partitions_led"] == sum(s["leader"] == broker for s in hosted)
        assert b["out_of_sync_replicas"] == sum(broker not in s["isr"] for s in hosted)
    west = client.get("/v1/brokers", params={"cluster": "west"}).json()["brokers"]
    assert {b["cluster"] for b in west} == {"west"} and len(west) == 4


def test_broker_detail(client: TestClient, fleet: Streamed) -> None:
    [waiting] = [b for b in fleet.brokers if b["pending"]]  # the leader of the re-elected partition
    body = client.get(f"/v1/brokers/{waiting['broker']}", params={"cluster": "east"}).json()
    assert body["pending_isr_changes"] == [{"topic": REELECTED[0], "partition": REELECTED[1]}]
    assert body["pending_isr_change_count"] == 1
    assert body["first_change_ts"] == waiting["first_change_ts"]
    assert body["last_propagation_ms"] == waiting["last_propagation_ms"]
    assert body["time_since_last_propagation_ms"] == NOW - waiting["last_propagation_ms"]
    sent = [p for p in fleet.propagations if p["broker"] == waiting["broker"] and p["cluster"] == "east"]
    assert body["recent_batches"] == sorted(sent, key=lambda p: -p["ts"])[:10]
    # A broker hosting a follower that was removed from the ISR lists it as out of sync.
    shrink = next(d for d in fleet.decisions if d["kind"] == "shrink" and d["cluster"] == "east"
                  and (d["topic"], d["partition"]) != OFFLINE)
    removed = shrink["replicas_changed"][0]
    r = client.get(f"/v1/brokers/{removed}", params={"cluster": "east"}).json()
    out = {(f["topic"], f["partition"]): f for f in r["out_of_sync_followers"]}
    follower = out[(shrink["topic"], shrink["partition"])]
    state = _state(fleet, "east", shrink["topic"], shrink["partition"])
    record = next(f for f in state["followers"] if f["replica"] == removed)
    assert follower["lag_offsets"] == record["lag_offsets"]
    assert follower["time_since_caught_up_ms"] == NOW - record["last_caught_up_ms"]
    assert r["out_of_sync_replicas"] == len(out)


def test_broker_lookup_errors(client: TestClient) -> None:
    assert client.get("/v1/brokers/1").status_code == 422  # broker 1 exists in both clusters
    assert client.get("/v1/brokers/1").json()["detail"].startswith("cluster:")
    assert client.get("/v1/brokers/5").json()["cluster"] == "east"  # west has brokers 0-3
    assert client.get("/v1/brokers/5", params={"cluster": "west"}).status_code == 404
    assert client.get("/v1/brokers/77").status_code == 404


def test_dead_letters(client: TestClient, fleet: Streamed) -> None:
    got = _pages(client, "/v1/dead-letters", "dead_letters", 1)
    assert [d["raw"] for d in got] == [d.raw for d in reversed(fleet.dead_letters)]
    assert [d["reason"] for d in got] == [d.reason for d in reversed(fleet.dead_letters)]


@pytest.mark.parametrize("path,parameter", [
    ("/v1/partitions?page_size=0", "page_size"),
    ("/v1/partitions?page_size=1001", "page_size"),
    ("/v1/partitions?state=sad", "state"),
    ("/v1/partitions?broker=-1", "broker"),
    ("/v1/partitions?topic=a%20b", "topic"),
    ("/v1/partitions?cluster=a%00b", "cluster"),
    ("/v1/partitions?page_token=%21%21", "page_token"),
    ("/v1/decisions?page_token=WyJhIiwiYiIsMV0", "page_token"),  # a partitions token on the decisions list
    ("/v1/decisions?kind=grow", "kind"),
    ("/v1/decisions?since=abc", "since"),
    ("/v1/propagations?trigger=soon", "trigger"),
    ("/v1/partitions/orders/-1", "partition"),
    ("/v1/partitions/bad%20topic/0", "topic"),
    ("/v1/brokers/x", "broker"),
])
def test_bad_parameters_are_422_naming_the_parameter(client: TestClient, path: str, parameter: str) -> None:
    r = client.get(path)
    assert r.status_code == 422
    body = r.json()
    assert set(body) == {"error", "detail"} and body["error"] == "invalid_parameter"
    assert parameter in body["detail"].split(":")[0]


def test_unknown_routes_and_methods_are_json_errors(client: TestClient) -> None:
    r = client.get("/v2/partitions")
    assert r.status_code == 404 and r.json()["error"] == "not_found"
    r = client.post("/v1/partitions")
    assert r.status_code == 405 and r.json()["error"] == "method_not_allowed"


def test_openapi_documents_every_route_with_examples(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    paths = set(schema["paths"])
    assert {"/v1/partitions", "/v1/partitions/{topic}/{partition}", "/v1/partitions/{topic}/{partition}/isr",
            "/v1/partitions/{topic}/{partition}/history", "/v1/brokers", "/v1/brokers/{broker}", "/v1/decisions",
            "/v1/propagations", "/healthz", "/readyz", "/metrics"} <= paths
    examples = [name for name, s in schema["components"]["schemas"].items() if s.get("examples")]
    assert {"PartitionPage", "PartitionDetail", "PartitionIsr", "DecisionPage", "BrokerDetail",
            "ErrorBody"} <= set(examples)
    detail = schema["paths"]["/v1/partitions/{topic}/{partition}"]["get"]["responses"]
    assert detail["404"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorBody")
    assert detail["422"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorBody")


@pytest.mark.parametrize("window_ms", [0, 20_000])
def test_the_shrink_window_is_configurable(fleet_store: tuple[str, Streamed], window_ms: int) -> None:
    url, fleet = fleet_store
    expected = [_key(s) for s in fleet.states if any(follower_shrink_predicted(f, NOW, window_ms)
                                                     for f in s["followers"])]
    with TestClient(create_app(url, shrink_window_ms=window_ms)) as client:
        got = client.get("/v1/partitions", params={"state": "shrink_predicted"}).json()["partitions"]
        assert [_key(p) for p in got] == expected
        assert all(p["shrink_predicted"] for p in got)
    # West's two stuck/slow followers: one already past its limit (any window), one 758 ms before it.
    assert len(expected) == {0: 1, 20_000: 2}[window_ms]
