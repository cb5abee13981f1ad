"""The AlterPartition path through the API (SPEC §4.9, §5): /v1/alter-partitions, the pending partitions, each
broker's queue and request in flight, and the metrics, over the KRaft cluster of tests/support/kraft.py replayed into a
store by `isrwatch replay --store`'s own code; ZooKeeper-mode answers keep their keys."""

from __future__ import annotations

from collections.abc import Iterator

import msgspec
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from isrwatch.api.app import create_app
from isrwatch.cli.replay import store_replay
from isrwatch.state.replay import ReplayResult
from tests.support.fleet import pages
from tests.support.kraft import PENDING_SINCE_MS, QUEUED, STUCK, UNTIL, kraft_replay

NOW = UNTIL + 1  # the replay's watermark


@pytest.fixture(scope="module")
def replayed() -> ReplayResult:
    return kraft_replay()


@pytest.fixture(scope="module")
def kraft(replayed: ReplayResult, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    url = f"sqlite:///{tmp_path_factory.mktemp('kraft') / 'isrwatch.db'}"
    store_replay(url, replayed)
    with TestClient(create_app(url)) as client:
        yield client


def test_alter_partitions_lists_each_request_newest_answer_first(kraft: TestClient, replayed: ReplayResult) -> None:
    requests = msgspec.to_builtins(replayed.alter_partitions)
    assert pages(kraft, "/v1/alter-partitions", "alter_partitions", 1) == requests[::-1]
    ineligible = kraft.get("/v1/alter-partitions", params={"broker": 2, "topic": "ledger", "partition": 3}).json()
    assert [r["partitions"][0]["error"] for r in ineligible["alter_partitions"]] == [None, "INELIGIBLE_REPLICA"]
    assert kraft.get("/v1/alter-partitions", params={"since": 6010}).json()["alter_partitions"] == requests[2:]
    assert kraft.get("/v1/alter-partitions", params={"broker": 1}).json() == {
        "alter_partitions": [],
        "next_page_token": None,
    }
    bad = kraft.get("/v1/alter-partitions", params={"partition": -1})
    assert bad.status_code == 422 and "partition" in bad.json()["detail"]


def test_isr_pending_partitions_show_their_state_and_age(kraft: TestClient) -> None:
    body = kraft.get("/v1/partitions", params={"state": "isr_pending"}).json()
    assert [(p["topic"], p["partition"]) for p in body["partitions"]] == [STUCK, QUEUED]
    for p in body["partitions"]:
        assert (p["isr_state"], p["maximal_isr"], p["pending_since_ms"]) == ("pending_shrink", [1, 2, 3], 15_000)
        assert p["time_pending_ms"] == NOW - PENDING_SINCE_MS
    detail = kraft.get(f"/v1/partitions/{STUCK[0]}/{STUCK[1]}").json()
    assert (detail["isr_state"], detail["isr"], detail["time_pending_ms"]) == ("pending_shrink", [1, 2, 3], 25_101)
    committed = kraft.get("/v1/partitions/ledger/2").json()
    assert (committed["isr_state"], committed["pending_since_ms"], committed["time_pending_ms"]) == (
        "committed",
        None,
        None,
    )


def test_brokers_show_their_queue_and_request_in_flight(kraft: TestClient) -> None:
    brokers = {b["broker"]: b for b in kraft.get("/v1/brokers").json()["brokers"]}
    assert (brokers[1]["queue_size"], brokers[1]["in_flight_partitions"], brokers[1]["in_flight_age_ms"]) == (
        1,
        1,
        NOW - PENDING_SINCE_MS,
    )
    assert (brokers[2]["queue_size"], brokers[2]["in_flight_partitions"], brokers[2]["in_flight_age_ms"]) == (
        0,
        None,
        None,
    )
    assert "queue_size" not in brokers[3]  # it leads nothing: no manager
    detail = kraft.get("/v1/brokers/1").json()
    assert [(i["topic"], i["partition"], i["kind"]) for i in detail["queue"]] == [(*QUEUED, "shrink")]
    assert detail["in_flight"]["sent_ms"] == PENDING_SINCE_MS and detail["in_flight"]["response_ms"] is None
    assert [(i["topic"], i["partition"], i["proposed_isr"]) for i in detail["in_flight"]["partitions"]] == [
        (*STUCK, [1, 2])
    ]


def test_decisions_tell_a_proposal_pending_committed_and_refused_apart(kraft: TestClient) -> None:
    """A leader's shrink or expand is only proposed: ledger-0/1's shrinks wait (the first in flight, the second
    queued), ledger-2's expand was committed, ledger-3's refused with INELIGIBLE_REPLICA then proposed again and
    committed; the controller's LeaderAndIsr decisions are no proposals."""
    decisions = pages(kraft, "/v1/decisions", "decisions", 3)
    told = sorted(
        (d["topic"], d["partition"], d["kind"], d["proposal"]["state"], d["proposal"]["error"])
        for d in decisions
        if d["proposal"] is not None
    )
    assert told == [
        (*STUCK, "shrink", "pending", None),
        (*QUEUED, "shrink", "pending", None),
        ("ledger", 2, "expand", "committed", None),
        ("ledger", 3, "expand", "committed", None),
        ("ledger", 3, "expand", "refused", "INELIGIBLE_REPLICA"),
    ]
    assert all((d["proposal"] is None) is (d["kind"] == "leader_and_isr") for d in decisions)
    [committed] = [d["proposal"] for d in decisions if d["partition"] == 2 and d["proposal"]]
    assert committed == {
        "state": "committed",
        "answered_ms": 3020,
        "error": None,
        "committed_isr": [1, 2, 3],
        "committed_partition_epoch": 1,
    }


def test_null_is_null_for_a_broker_that_never_sent_a_batch(kraft: TestClient) -> None:
    """Leaders that propose with AlterPartition send no ISR-change batch: no last propagation (API and metric), and
    their last ISR change is their last commit (broker 2's at 6010 ms; broker 1 has none)."""
    brokers = {b["broker"]: b for b in kraft.get("/v1/brokers").json()["brokers"]}
    assert {b: (v["last_propagation_ms"], v["time_since_last_propagation_ms"]) for b, v in brokers.items()} == {
        b: (None, None) for b in (1, 2, 3)
    }
    assert (brokers[1]["last_isr_change_ms"], brokers[2]["last_isr_change_ms"]) == (None, 6010)
    assert kraft.get("/v1/brokers/2").json()["last_isr_change_ms"] == 6010
    scraped = kraft.get("/metrics").text
    assert "isrwatch_broker_seconds_since_last_propagation{" not in scraped
    for broker in (1, 2, 3):  # every replica is back in its ISR: each follower's view says 0
        assert f'isrwatch_broker_out_of_sync_replicas{{broker="{broker}",cluster="kraft"}} 0.0' in scraped


def test_metrics_show_the_alter_partition_path(kraft: TestClient) -> None:
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(kraft.get("/metrics").text)
        for s in family.samples
    }
    broker1, broker2 = (("broker", "1"), ("cluster", "kraft")), (("broker", "2"), ("cluster", "kraft"))
    age = (NOW - PENDING_SINCE_MS) / 1000
    assert samples[("isrwatch_broker_oldest_isr_pending_seconds", broker1)] == age
    assert samples[("isrwatch_broker_isr_pending_partitions", broker1)] == 2
    assert samples[("isrwatch_broker_alter_partition_in_flight_age_seconds", broker1)] == age
    assert samples[("isrwatch_broker_alter_partition_queue_size", broker1)] == 1
    assert samples[("isrwatch_broker_alter_partition_queue_size", broker2)] == 0
    assert ("isrwatch_broker_alter_partition_in_flight_age_seconds", broker2) not in samples
    assert ("isrwatch_broker_oldest_isr_pending_seconds", broker2) not in samples
    assert samples[("isrwatch_isr_pending_partitions", (("cluster", "kraft"),))] == 2
    assert samples[("isrwatch_partitions", (("cluster", "kraft"), ("state", "isr_pending")))] == 2
    outcomes = {
        labels[2][1]: value
        for (name, labels), value in samples.items()
        if name == "isrwatch_alter_partition_requests_total"
    }
    assert outcomes == {"committed": 2, "INELIGIBLE_REPLICA": 1}
    assert samples[("isrwatch_failed_isr_updates_total", (("reason", "INELIGIBLE_REPLICA"),))] == 1
    latency = (("cluster", "kraft"),)
    assert samples[("isrwatch_alter_partition_latency_seconds_count", latency)] == 3
    assert samples[("isrwatch_alter_partition_latency_seconds_bucket", (*latency, ("le", "0.025")))] == 3


def test_zookeeper_mode_answers_keep_their_keys(client: TestClient) -> None:
    """The fleet (ZooKeeper mode): no AlterPartition key in any partition or broker answer."""
    new = {"isr_state", "maximal_isr", "pending_since_ms", "time_pending_ms", "elr", "last_known_elr"}
    for p in pages(client, "/v1/partitions", "partitions", 1000):
        assert not new & p.keys()
        assert (
            not new
            & client.get(f"/v1/partitions/{p['topic']}/{p['partition']}", params={"cluster": p["cluster"]})
            .json()
            .keys()
        )
    for b in client.get("/v1/brokers").json()["brokers"]:
        assert not {"queue_size", "in_flight_partitions", "in_flight_age_ms"} & b.keys()
        detail = client.get(f"/v1/brokers/{b['broker']}", params={"cluster": b["cluster"]}).json()
        assert not {"queue", "in_flight"} & detail.keys()
    assert client.get("/v1/partitions", params={"state": "isr_pending"}).json()["partitions"] == []


def test_the_openapi_document_names_the_route_and_its_model(kraft: TestClient) -> None:
    spec = kraft.get("/openapi.json").json()
    route = spec["paths"]["/v1/alter-partitions"]["get"]
    assert route["operationId"].startswith("list_alter_partitions")
    assert {p["name"] for p in route["parameters"]} >= {"cluster", "broker", "topic", "partition", "since"}
    assert "AlterPartitionRequest" in spec["components"]["schemas"]
