"""A small KRaft cluster whose leaders propose their ISR changes with AlterPartition (SPEC §4.9), replayed through the
real engine: the shell's AlterPartition data for the store, the API, the status page and the deploy checks.

Broker 2 leads ledger-2 and ledger-3, whose follower 1 catches up: ledger-2's expand is committed 20 ms later;
ledger-3's is refused (INELIGIBLE_REPLICA: the controller fenced broker 1 before the leader's metadata said so),
proposed again once broker 1 is unfenced, and committed. Broker 1 leads ledger-0 and ledger-1, whose follower 3
never fetches: at the check of 15 s it proposes both shrinks; the first request gets no answer (a stuck controller
channel), so it stays in flight and the second proposal waits in the queue until the end (40.1 s). At the end every
partition's committed ISR is full: the cluster adds partitions and AlterPartition state, no under-replicated one.
"""

from __future__ import annotations

import json
from pathlib import Path

from isrwatch.state.config import Config
from isrwatch.state.replay import ReplayResult, replay

CLUSTER = "kraft"
UNTIL = 40_100  # the deploy demo's own end, so that both clusters are judged at the same watermark
SETTINGS = {"replica_lag_time_max_ms": 10_000, "kafka_version": "3.9", "isr_protocol": "alter_partition"}
STUCK = ("ledger", 0)  # its shrink in flight from 15 s, never answered
QUEUED = ("ledger", 1)  # its shrink queued behind it
PENDING_SINCE_MS = 15_000


def _lai(partition: int, leader: int, replicas: list[int], isr: list[int]) -> dict:
    return {
        "type": "leader_and_isr",
        "ts": 1000,
        "topic": "ledger",
        "partition": partition,
        "controller_epoch": 1,
        "leader": leader,
        "leader_epoch": 0,
        "isr": isr,
        "replicas": replicas,
        "partition_epoch": 0,
        "leader_leo": 100,
    }


def _fetch(ts: int, partition: int, replica: int, leo: int, **extra: int) -> dict:
    return {
        "type": "fetch",
        "ts": ts,
        "topic": "ledger",
        "partition": partition,
        "replica": replica,
        "fetch_offset": leo,
        "leader_leo": leo,
        **extra,
    }


def _answer(ts: int, partition: int, error: str | None = None) -> dict:
    committed = {"isr": [1, 2, 3], "leader_epoch": 0, "partition_epoch": 1} if error is None else {}
    return {
        "type": "alter_partition_response",
        "ts": ts,
        "topic": "ledger",
        "partition": partition,
        "broker": 2,
        "error": error,
        **committed,
    }


def _registration(ts: int, fenced: bool) -> dict:
    return {
        "type": "broker_registration",
        "ts": ts,
        "id": 1,
        "epoch": 7,
        "fenced": fenced,
        "in_controlled_shutdown": False,
    }


def kraft_events() -> list[dict]:
    events = [
        _lai(0, 1, [1, 2, 3], [1, 2, 3]),
        _lai(1, 1, [1, 3, 2], [1, 2, 3]),
        _lai(2, 2, [2, 3, 1], [2, 3]),
        _lai(3, 2, [2, 1, 3], [2, 3]),
        {"type": "append", "ts": 2000, "topic": "ledger", "partition": 0, "leader_leo": 150},
        {"type": "append", "ts": 2000, "topic": "ledger", "partition": 1, "leader_leo": 150},
        _fetch(2100, 0, 2, 150),
        _fetch(2100, 1, 2, 150),
        _fetch(2500, 2, 3, 100),
        _fetch(2500, 3, 3, 100),
        _fetch(3000, 2, 1, 100),
        _answer(3020, 2),
        _fetch(5000, 3, 1, 100),
        _answer(5010, 3, "INELIGIBLE_REPLICA"),
        _registration(5010, True),
        _registration(5500, False),
        _fetch(6000, 3, 1, 100, broker_epoch=7),
        _answer(6010, 3),
    ]
    return [{**e, "cluster": CLUSTER} for e in events]


def kraft_lines() -> list[bytes]:
    return [json.dumps(e).encode() for e in kraft_events()]


def settings_args() -> list[str]:
    """The replay's `--set` arguments for this cluster's settings."""
    return [arg for key, value in SETTINGS.items() for arg in ("--set", f"{key}={json.dumps(value)}")]


def write_events(path: Path) -> Path:
    path.write_bytes(b"\n".join(kraft_lines()) + b"\n")
    return path


def kraft_replay() -> ReplayResult:
    """The cluster through the real engine, as `isrwatch replay` runs it."""
    return replay([kraft_lines()], Config.from_dict(SETTINGS), until=UNTIL)
