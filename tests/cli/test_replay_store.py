"""`isrwatch replay --store`: a replay fills the store as the next batch, and the API serves the expected state."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from isrwatch.api.app import create_app
from isrwatch.cli import main as isrwatch
from isrwatch.store import open_store

SCENARIOS = Path(__file__).parents[1] / "scenarios"


def _replay(name: str, *args: str) -> int:
    base = SCENARIOS / name
    return isrwatch(
        [
            "replay",
            f"{base}.events.jsonl",
            "--config",
            f"{base}.config.json",
            "--until",
            (SCENARIOS / f"{name}.until").read_text().strip(),
            *args,
        ]
    )


def _expected(name: str, kind: str) -> list[dict]:
    return [json.loads(line) for line in (SCENARIOS / f"{name}.expected" / f"{kind}.jsonl").read_text().splitlines()]


def _multiset(records: list[dict]) -> list[str]:
    """Records compared as the scenario README says: a multiset of objects with sorted keys."""
    return sorted(json.dumps(r, sort_keys=True) for r in records)


@pytest.mark.parametrize("name", ["01-stuck-follower-shrink", "05-propagation-linger-and-max-delay"])
def test_replay_fills_the_store_the_api_reads(store_url: str, name: str) -> None:
    assert _replay(name, "--store", store_url) == 0
    with open_store(store_url) as store:
        assert store.last_batch_id() == 0
        until = int((SCENARIOS / f"{name}.until").read_text())
        assert store.stream_position().watermark_ms == until + 1
    with TestClient(create_app(store_url)) as client:
        for state in _expected(name, "state"):
            got = client.get(f"/v1/partitions/{state['topic']}/{state['partition']}").json()
            for field, value in state.items():
                if field != "followers":
                    assert got[field] == value, field
            assert [{k: f[k] for k in state["followers"][0]} for f in got["followers"]] == state["followers"]
        decisions = client.get("/v1/decisions", params={"page_size": 1000}).json()["decisions"]
        # ZooKeeper-mode leaders write their ISR themselves: no decision is a proposal.
        assert _multiset(decisions) == _multiset([{**d, "proposal": None} for d in _expected(name, "decisions")])
        propagations = client.get("/v1/propagations", params={"page_size": 1000}).json()["propagations"]
        assert _multiset(propagations) == _multiset(_expected(name, "propagations"))


def test_a_second_replay_is_the_next_batch(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'twice.db'}"
    assert _replay("01-stuck-follower-shrink", "--store", url, "--out", str(tmp_path / "out")) == 0
    assert (tmp_path / "out" / "state.jsonl").is_file()
    assert _replay("01-stuck-follower-shrink", "--store", url) == 0
    with open_store(url) as store:
        assert store.last_batch_id() == 1
        assert len(store.partitions().items) == 1  # upserted, not duplicated
        assert len(store.decisions(limit=1000).items) == 2 * len(_expected("01-stuck-follower-shrink", "decisions"))


def test_replay_needs_an_output(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert _replay("01-stuck-follower-shrink") == 2
    assert "--out DIR, --store [URL] or both" in capsys.readouterr().err
    assert _replay("01-stuck-follower-shrink", "--store", "mysql://nope/x") == 2
    assert "store URL" in capsys.readouterr().err


def test_replay_counts_dead_letters_and_ignored_fetches(tmp_path: Path) -> None:
    events = tmp_path / "e.jsonl"
    events.write_text(
        "\n".join(
            [
                '{"type": "fetch", "ts": 1, "topic": "t", "partition": 0, "replica": 2, "fetch_offset": 0, '
                '"leader_leo": 0}',
                "not json",
                '{"type": "append", "ts": "late"}',
            ]
        )
        + "\n"
    )
    url = f"sqlite:///{tmp_path / 'd.db'}"
    assert isrwatch(["replay", str(events), "--store", url]) == 0
    with open_store(url) as store:
        tallies = {(m, tuple(labels.values())): v for m, labels, v in store.tallies()}
        assert tallies[("ignored_fetches", ("no_leader_and_isr",))] == 1
        assert tallies[("dead_letters", ("invalid_json",))] == 1
        assert tallies[("dead_letters", ("wrong_type",))] == 1
        raws = [d["raw"].rstrip() for d in store.dead_letters().items]
        assert raws == ['{"type": "append", "ts": "late"}', "not json"]


def test_an_ignored_tick_reaches_the_summary_the_store_and_metrics(tmp_path: Path) -> None:
    """A tick from a Kafka version isrwatch does not model runs, and its version is counted, not lost."""
    events = tmp_path / "e.jsonl"
    events.write_text(
        '{"type": "tick", "ts": 1000, "task": "isr-expiration", "broker": 1, "kafka_version": "5.0.0"}\n'
        '{"type": "tick", "ts": 2000, "task": "isr-expiration", "kafka_version": "3.9.2"}\n'
    )
    url = f"sqlite:///{tmp_path / 'd.db'}"
    assert isrwatch(["replay", str(events), "--out", str(tmp_path / "out"), "--store", url]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    expected = {"kafka_version_without_broker": 1, "unsupported_kafka_version": 1}
    assert summary["ignored_ticks_by_reason"] == expected
    with open_store(url) as store:
        tallies = {(m, tuple(labels.values())): v for m, labels, v in store.tallies()}
    assert {reason: tallies[("ignored_ticks", (reason,))] for reason in expected} == expected
    with TestClient(create_app(url)) as client:
        exposition = client.get("/metrics").text
    for reason, n in expected.items():
        assert f'isrwatch_ignored_ticks_total{{reason="{reason}"}} {n}.0' in exposition


def test_a_replay_leaves_the_brokers_pending_sets_in_the_store(tmp_path: Path) -> None:
    """02 ends 6 s after its shrink: the change is recorded but not yet propagated."""
    url = f"sqlite:///{tmp_path / 'pending.db'}"
    assert _replay("02-slow-follower-shrink", "--store", url) == 0
    with TestClient(create_app(url)) as client:
        broker = client.get("/v1/brokers/1").json()
    assert broker["pending_isr_changes"] == [{"topic": "orders", "partition": 0}]
    assert broker["last_isr_change_ms"] == 15000
