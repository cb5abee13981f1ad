"""Agent input for the audit: a story of ticks and a broker's own writes, timed as the tests need."""

from __future__ import annotations

from tests.support.state import append, fetch, lai, tick

END = 40_000  # past every side's time + the audit window (the lag)


def story(expiration_runs: list[int], *broker_acts: dict) -> list[dict]:
    """Broker 1's stream: records appended at 2 s, follower 2 fetching caught up every 5 s, follower 3 only until
    1500, the broker's expiration runs at `expiration_runs`, its propagation runs every 2.5 s, plus what the
    broker did (`broker_acts`)."""
    events = [
        lai(1000, 1, [1, 2, 3], [1, 2, 3], 0, leader_leo=100, hw=100, broker=1),
        fetch(1500, 3, 100, 100, broker=1),
        fetch(1500, 2, 100, 100, broker=1),
        append(2000, 200, broker=1),
        *(fetch(ts, 2, 200, 200, broker=1) for ts in range(6500, END, 5000)),
        *(tick(ts, "isr-expiration", broker=1) for ts in expiration_runs),
        *(tick(ts, "isr-change-propagation", broker=1) for ts in range(2500, END, 2500)),
        *broker_acts,
    ]
    return sorted(events, key=lambda ev: ev["ts"])


def isr_updated(ts: int, isr: list[int], epoch: int, *, check_ms: int, out: list[int] = (3,)) -> dict:
    return {
        "type": "isr_updated",
        "ts": ts,
        "broker": 1,
        "topic": "t",
        "partition": 0,
        "leader": 1,
        "isr": isr,
        "isr_before": [1, 2, 3],
        "partition_epoch": epoch,
        "kind": "shrink",
        "out_of_sync": [{"replica": r, "leo": 100, "last_caught_up_ms": 1500, "last_fetch_ms": 1500} for r in out],
        "check_ms": check_ms,
    }


def propagated(ts: int) -> dict:
    return {"type": "isr_change_propagated", "ts": ts, "broker": 1, "partitions": [{"topic": "t", "partition": 0}]}


RUNS_AT_0 = list(range(5000, END, 5000))  # 15000 is the first run past 3's limit (11500)


def agent_events() -> list[dict]:
    timing = story(list(range(1500, END, 5000)), isr_updated(11_520, [1, 2], 1, check_ms=11_502), propagated(17_500))
    return [{**ev, "cluster": "a"} for ev in timing] + [{**ev, "cluster": "b"} for ev in story(RUNS_AT_0)]
