"""/metrics: promtool-clean exposition with the contract's names, values equal to what the engine decided,
and bounded cardinality (top N followers; per-partition series only for allow-listed topics)."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from isrwatch.api.app import create_app
from isrwatch.store import open_store
from tests.support.fleet import END, S, Streamed, follower_shrink_predicted

CONTRACT = Path(__file__).parents[2] / "docs" / "CONTRACTS.md"
NOW = END + 1


def _samples(text: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(sample)
    return out


def _value(samples: dict[str, list], name: str, **labels: str) -> float:
    [match] = [s.value for s in samples[name] if all(s.labels.get(k) == v for k, v in labels.items())]
    return match


def _promtool(text: str) -> subprocess.CompletedProcess:
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    assert Path(promtool).exists(), "promtool missing: run `bash scripts/provision.sh` (Debian package prometheus)"
    return subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def exposition(fleet_store: tuple[str, Streamed]) -> str:
    with TestClient(create_app(fleet_store[0])) as client:
        r = client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=")
    return r.text


def test_promtool_accepts_the_exposition(exposition: str) -> None:
    check = _promtool(exposition)
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.strip() == ""  # no lint findings either


def test_promtool_would_catch_a_bad_name() -> None:
    check = _promtool(
        "# HELP isrwatch_things_count_total x\n# TYPE isrwatch_things_count_total gauge\n"
        "isrwatch_things_count_total 1\n"
    )
    assert check.returncode != 0 or check.stdout.strip()


def test_every_metric_named_in_the_contract_is_exposed(fleet_store: tuple[str, Streamed]) -> None:
    with TestClient(create_app(fleet_store[0], partition_metrics_topics=("topic-2",))) as client:
        exposition = client.get("/metrics").text  # the per-partition families appear only for allow-listed topics
    section = CONTRACT.read_text().split("## Metrics", 1)[1]
    named = set(re.findall(r"`(isrwatch_[a-z_]+)", section))
    assert len(named) > 20
    families = {f.name for f in text_string_to_metric_families(exposition)}
    types = {f.name: f.type for f in text_string_to_metric_families(exposition)}
    for name in named:
        assert name.removesuffix("_total") in families, name
        if name.endswith("_total"):
            assert types[name.removesuffix("_total")] == "counter", name
    assert all(name.startswith("isrwatch_") for name in families)


def test_values_match_the_engine(exposition: str, fleet: Streamed) -> None:
    samples = _samples(exposition)
    for cluster in ("east", "west"):
        states = [s for s in fleet.states if s["cluster"] == cluster]
        assert _value(samples, "isrwatch_partitions", cluster=cluster, state="total") == len(states)
        for flag in ("under_replicated", "under_min_isr", "at_min_isr", "offline"):
            count = sum(s[flag] for s in states)
            assert _value(samples, "isrwatch_partitions", cluster=cluster, state=flag) == count
            assert _value(samples, f"isrwatch_{flag}_partitions", cluster=cluster) == count
    assert _value(samples, "isrwatch_under_replicated_partitions", cluster="east") > 0
    predicted = Counter(
        s["cluster"] for s in fleet.states for f in s["followers"] if follower_shrink_predicted(f, NOW, None)
    )
    assert {s.labels["cluster"]: s.value for s in samples["isrwatch_followers_predicted_to_shrink"]} == predicted
    shrinks = Counter(
        (d["cluster"], str(d["leader"]), r)
        for d in fleet.decisions
        if d["kind"] == "shrink"
        for r in d["reasons"].values()
    )
    assert {
        (s.labels["cluster"], s.labels["broker"], s.labels["reason"]): s.value
        for s in samples["isrwatch_isr_shrinks_total"]
    } == shrinks
    expands = Counter((d["cluster"], str(d["leader"])) for d in fleet.decisions if d["kind"] == "expand")
    assert {
        (s.labels["cluster"], s.labels["broker"]): s.value for s in samples["isrwatch_isr_expands_total"]
    } == expands
    batches = Counter((p["cluster"], str(p["broker"]), p["trigger"]) for p in fleet.propagations)
    assert {
        (s.labels["cluster"], s.labels["broker"], s.labels["trigger"]): s.value
        for s in samples["isrwatch_propagation_batches_total"]
    } == batches
    assert _value(samples, "isrwatch_propagation_batch_size_partitions_count", cluster="east") == len(batches)
    delays = [(p["ts"] - p["first_change_ts"]) / 1000 for p in fleet.propagations]
    assert _value(samples, "isrwatch_propagation_delay_seconds_sum", cluster="east") == pytest.approx(sum(delays))
    assert _value(samples, "isrwatch_propagation_delay_seconds_bucket", cluster="east", le="7.5") == sum(
        d <= 7.5 for d in delays
    )
    [waiting] = [b for b in fleet.brokers if b["pending"]]
    assert _value(samples, "isrwatch_broker_pending_isr_changes", cluster="east", broker=str(waiting["broker"])) == 1
    for broker in {b["broker"] for b in fleet.brokers if b["cluster"] == "east"}:
        sent = [p["ts"] for p in fleet.propagations if p["broker"] == broker and p["cluster"] == "east"]
        since = [
            s.value
            for s in samples.get("isrwatch_broker_seconds_since_last_propagation", [])
            if s.labels == {"cluster": "east", "broker": str(broker)}
        ]
        assert since == ([(NOW - max(sent)) / 1000] if sent else [])  # absent for a broker that never sent one
    for reason, n in fleet.ignored_fetches.items():
        assert _value(samples, "isrwatch_ignored_fetches_total", reason=reason) == n
    for category, n in Counter(d.category for d in fleet.dead_letters).items():
        assert _value(samples, "isrwatch_dead_letters_total", reason=category) == n
    assert _value(samples, "isrwatch_stream_watermark_seconds") == NOW / 1000


def test_top_followers_are_the_slowest_and_bounded(fleet_store: tuple[str, Streamed]) -> None:
    url, fleet = fleet_store
    behind = sorted(
        (f["last_caught_up_ms"], s["cluster"], s["topic"], str(s["partition"]), str(f["replica"]))
        for s in fleet.states
        for f in s["followers"]
        if f["shrink_eligible_at_ms"] is not None
    )
    with TestClient(create_app(url, top_followers=1)) as client:
        samples = _samples(client.get("/metrics").text)
    [slowest] = samples["isrwatch_follower_time_since_caught_up_seconds"]
    caught_up_ms, cluster, topic, partition, replica = behind[0]
    assert slowest.labels == {"cluster": cluster, "topic": topic, "partition": partition, "replica": replica}
    assert slowest.value == (NOW - caught_up_ms) / 1000
    [laggiest] = samples["isrwatch_follower_lag_offsets"]
    assert laggiest.value == max(f["lag_offsets"] or 0 for s in fleet.states for f in s["followers"])
    with TestClient(create_app(url, top_followers=0)) as client:
        samples = _samples(client.get("/metrics").text)
    assert "isrwatch_follower_lag_offsets" not in samples


def test_per_partition_series_only_for_allow_listed_topics(fleet_store: tuple[str, Streamed], exposition: str) -> None:
    url, fleet = fleet_store
    default = _samples(exposition)
    assert not [name for name in default if name.startswith("isrwatch_partition_")]
    assert len(default["isrwatch_follower_lag_offsets"]) <= 10
    with TestClient(create_app(url, partition_metrics_topics=("topic-2",))) as client:
        text = client.get("/metrics").text
    assert _promtool(text).returncode == 0
    samples = _samples(text)
    topic2 = [s for s in fleet.states if s["topic"] == "topic-2"]
    isr = {
        (x.labels["cluster"], x.labels["partition"]): x.value for x in samples["isrwatch_partition_in_sync_replicas"]
    }
    assert isr == {(s["cluster"], str(s["partition"])): len(s["isr"]) for s in topic2}
    lagging = [(s, f) for s in topic2 for f in s["followers"] if (f["lag_offsets"] or 0) > 0]
    listed = {
        (x.labels["cluster"], x.labels["topic"], x.labels["partition"], x.labels["replica"])
        for x in samples["isrwatch_follower_lag_offsets"]
    }
    assert {(s["cluster"], s["topic"], str(s["partition"]), str(f["replica"])) for s, f in lagging} <= listed


def test_stream_health_comes_from_the_progress_rows(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'p.db'}"
    with open_store(url) as store:
        store.write_batch(0, watermark_ms=S)
        store.record_progress(
            {
                "batch_id": 0,
                "wall_ms": S + 9000,
                "watermark_ms": S,
                "input_rows": 1200,
                "input_rows_per_second": 400.0,
                "processed_rows_per_second": 900.0,
                "batch_duration_ms": 1500,
                "state_rows": 64,
                "late_rows": 0,
            }
        )
    with TestClient(create_app(url)) as client:
        text = client.get("/metrics").text
    assert _promtool(text).returncode == 0
    samples = _samples(text)
    assert _value(samples, "isrwatch_stream_batch_duration_seconds") == 1.5
    assert _value(samples, "isrwatch_stream_input_rows_per_second") == 400.0
    assert _value(samples, "isrwatch_stream_state_rows") == 64
    assert _value(samples, "isrwatch_stream_input_rows_total") == 1200
    assert _value(samples, "isrwatch_stream_watermark_seconds") == S / 1000
    assert 0 <= _value(samples, "isrwatch_stream_last_batch_age_seconds") < 60
    assert _value(samples, "isrwatch_stream_watermark_lag_seconds") > 0
