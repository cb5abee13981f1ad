"""/v1/brokers: what each broker leads and hosts, its pending ISR changes and batches."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.support.fleet import NOW, OFFLINE, REELECTED, Streamed, state_record


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
    sent = [p for p in fleet.propagations if p["broker"] == waiting["broker"] and p["cluster"] == "east"]
    # Its last batch, not its throttle's clock (which starts at the schedule's origin): null if it sent none.
    last = max((p["ts"] for p in sent), default=None)
    assert body["last_propagation_ms"] == last
    assert body["time_since_last_propagation_ms"] == (None if last is None else NOW - last)
    assert body["recent_batches"] == sorted(sent, key=lambda p: -p["ts"])[:10]
    # A broker hosting a follower that was removed from the ISR lists it as out of sync.
    shrink = next(
        d
        for d in fleet.decisions
        if d["kind"] == "shrink" and d["cluster"] == "east" and (d["topic"], d["partition"]) != OFFLINE
    )
    removed = shrink["replicas_changed"][0]
    r = client.get(f"/v1/brokers/{removed}", params={"cluster": "east"}).json()
    out = {(f["topic"], f["partition"]): f for f in r["out_of_sync_followers"]}
    follower = out[(shrink["topic"], shrink["partition"])]
    state = state_record(fleet, "east", shrink["topic"], shrink["partition"])
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
