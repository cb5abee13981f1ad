"""/v1/decisions, /v1/propagations, /v1/dead-letters: filters and newest-first pages."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

from tests.support.fleet import S, Streamed, pages


@pytest.mark.parametrize(
    "params,keep",
    [
        ({}, lambda d: True),
        ({"kind": "shrink"}, lambda d: d["kind"] == "shrink"),
        ({"kind": "expand", "cluster": "east"}, lambda d: d["kind"] == "expand"),
        ({"topic": "topic-1"}, lambda d: d["topic"] == "topic-1"),
        ({"broker": 0}, lambda d: d["leader"] == 0 or 0 in d["replicas_changed"]),
        ({"since": S + 15_000}, lambda d: d["ts"] >= S + 15_000),
        (
            {"since": S + 15_000, "kind": "leader_and_isr"},
            lambda d: d["ts"] >= S + 15_000 and d["kind"] == "leader_and_isr",
        ),
    ],
)
def test_decisions_filters(client: TestClient, fleet: Streamed, params: dict, keep: Callable) -> None:
    expected = [{**d, "proposal": None} for d in fleet.decisions if keep(d)]  # ZooKeeper mode: no proposal
    got = pages(client, "/v1/decisions", "decisions", 10, **params)
    assert sorted(map(str, got)) == sorted(map(str, expected))
    assert [d["ts"] for d in got] == sorted((d["ts"] for d in got), reverse=True)


@pytest.mark.parametrize(
    "params,keep",
    [
        ({}, lambda p: True),
        ({"broker": 2}, lambda p: p["broker"] == 2),
        ({"topic": "topic-2"}, lambda p: any(tp["topic"] == "topic-2" for tp in p["partitions"])),
        ({"trigger": "linger"}, lambda p: p["trigger"] == "linger"),
        ({"trigger": "max_delay"}, lambda p: p["trigger"] == "max_delay"),
        ({"since": S + 22_501}, lambda p: p["ts"] >= S + 22_501),
        ({"cluster": "west"}, lambda p: p["cluster"] == "west"),
    ],
)
def test_propagations_filters(client: TestClient, fleet: Streamed, params: dict, keep: Callable) -> None:
    expected = [p for p in fleet.propagations if keep(p)]
    got = pages(client, "/v1/propagations", "propagations", 1, **params)
    assert sorted(map(str, got)) == sorted(map(str, expected))


def test_dead_letters(client: TestClient, fleet: Streamed) -> None:
    got = pages(client, "/v1/dead-letters", "dead_letters", 1)
    assert [d["raw"] for d in got] == [d.raw for d in reversed(fleet.dead_letters)]
    assert [d["reason"] for d in got] == [d.reason for d in reversed(fleet.dead_letters)]
