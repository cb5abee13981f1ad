"""The app: every route documented with examples, CORS off unless configured."""

from __future__ import annotations

from fastapi.testclient import TestClient

from isrwatch.api.app import create_app


def test_openapi_documents_every_route_with_examples(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    paths = set(schema["paths"])
    assert {
        "/v1/partitions",
        "/v1/partitions/{topic}/{partition}",
        "/v1/partitions/{topic}/{partition}/isr",
        "/v1/partitions/{topic}/{partition}/history",
        "/v1/brokers",
        "/v1/brokers/{broker}",
        "/v1/decisions",
        "/v1/propagations",
        "/healthz",
        "/readyz",
        "/metrics",
    } <= paths
    examples = [name for name, s in schema["components"]["schemas"].items() if s.get("examples")]
    assert {"PartitionPage", "PartitionDetail", "PartitionIsr", "DecisionPage", "BrokerDetail", "ErrorBody"} <= set(
        examples
    )
    detail = schema["paths"]["/v1/partitions/{topic}/{partition}"]["get"]["responses"]
    assert detail["404"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorBody")
    assert detail["422"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorBody")


def test_cors_is_off_unless_configured(scenario_url: str) -> None:
    origin = {"Origin": "https://grafana.example"}
    with TestClient(create_app(scenario_url)) as client:
        assert "access-control-allow-origin" not in client.get("/v1/partitions", headers=origin).headers
    with TestClient(create_app(scenario_url, cors_origins=("https://grafana.example",))) as client:
        r = client.get("/v1/partitions", headers=origin)
        assert r.headers["access-control-allow-origin"] == "https://grafana.example"
        other = client.get("/v1/partitions", headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in other.headers
