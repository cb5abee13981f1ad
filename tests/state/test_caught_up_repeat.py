"""`caught_up_repeat` (SPEC §6): which fetches arriving behind the stream's frontier the engine still applies. A
caught-up repeat of an ISR follower changes only its lastCaughtUpTimeMs and lastFetchTimeMs; anything else that came
behind the frontier could have changed what was already applied, and is late."""

from __future__ import annotations

import pytest

from isrwatch.state.config import Config
from isrwatch.state.engine import PartitionEngine
from isrwatch.state.events import Fetch
from isrwatch.state.partition import Outputs
from tests.support.state import fetch, lai, parse_all

AGENT = Config(replica_lag_time_max_ms=5000).with_profile("agent")
BROKER = {"broker": 1}


def engine_after(config: Config = AGENT) -> PartitionEngine:
    """Leader 1 of t-0 (ISR 1, 2, 3) at LEO 10; follower 2 caught up at 1000, follower 3 at 1100; applied to 2000."""
    engine = PartitionEngine(config)
    engine.add(
        parse_all(
            [
                lai(900, 1, [1, 2, 3], [1, 2, 3], 0, leader_leo=10, **BROKER),
                fetch(1000, 2, 10, 10, current_leader_epoch=0, **BROKER),
                fetch(1100, 3, 10, 10, current_leader_epoch=0, **BROKER),
            ]
        )
    )
    engine.advance(2000)
    return engine


def late(**changes: object) -> Fetch:
    fields = {"current_leader_epoch": 0, **BROKER} | changes
    ts = fields.pop("ts", 1500)
    replica = fields.pop("replica", 2)
    offset = fields.pop("fetch_offset", 10)
    leo = fields.pop("leader_leo", 10)
    return parse_all([fetch(ts, replica, offset, leo, **fields)])[0]  # type: ignore[arg-type]


def test_a_caught_up_repeat_behind_the_frontier_moves_only_its_follower_s_times() -> None:
    engine = engine_after()
    out = Outputs()
    assert engine.take_caught_up_repeat(late(), out)
    follower = engine.partitions["default", "t", 0].follower(2)
    assert follower is not None and (follower.last_caught_up_ms, follower.last_fetch_ms) == (1500, 1500)
    assert not out.decisions and not out.changes


@pytest.mark.parametrize(
    ("why", "changes"),
    [
        ("another leader's", {"broker": 2, "replica": 3}),
        ("a stale leader epoch", {"current_leader_epoch": 1}),
        ("new records (not caught up)", {"fetch_offset": 9, "leader_leo": 10}),
        ("a LEO the model has not seen", {"fetch_offset": 11, "leader_leo": 11}),
        ("before the follower's last fetch the model applied", {"ts": 950}),
        ("no broker (not the agent's)", {"broker": None}),
    ],
)
def test_any_other_fetch_behind_the_frontier_is_late(why: str, changes: dict) -> None:
    assert not engine_after().take_caught_up_repeat(late(**changes), Outputs()), why


def test_a_follower_out_of_the_isr_is_no_repeat() -> None:
    engine = PartitionEngine(AGENT)
    engine.add(
        parse_all([lai(900, 1, [1, 2], [1, 2, 3], 0, leader_leo=10, **BROKER), fetch(1000, 3, 10, 10, **BROKER)])
    )
    engine.advance(950)
    assert not engine.take_caught_up_repeat(late(replica=3), Outputs())  # its fetch would expand the ISR


def test_with_scheduled_checks_nothing_behind_the_frontier_is_a_repeat() -> None:
    """A scheduled isr-expiration check may have read the follower meanwhile (only the agent's ticks come after)."""
    engine = engine_after(Config(replica_lag_time_max_ms=5000))
    assert not engine.take_caught_up_repeat(late(), Outputs())
