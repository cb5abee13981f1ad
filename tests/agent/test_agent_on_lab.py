"""isrwatch-agent on the session lab's real brokers: what it sends to the monitor broker's `isrwatch.events`
during a stall and a restart, and what isrwatch (the streaming job over that topic, `--profile agent`, into a
store) makes of it. The cluster's truth comes from ZooKeeper, never from isrwatch.

The faults are the session's (tests/support/lab.py: a 10 s stall of one broker, a kill and restart of another, then a
preferred election that puts the leaders back; the lab's tests assert what ZooKeeper showed during them), and the
events and the store are the session's one stream over the topic (the `streamed` fixture, after every lab test),
so each test looks at its fault's time window; the lab is left healthy.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest

from isrwatch.lab.record import Lab, load
from isrwatch.state.events import DeadLetter, parse_event
from isrwatch.store import open_store
from tests.support.jobs import drain
from tests.support.lab import Restart, Stall, Streamed

# A fetch already being served when SIGSTOP lands, or parked in the leader's purgatory, carries a time up to
# replica.fetch.wait.max.ms (500 ms) after it; nothing may after that.
IN_FLIGHT_MS = 1000
SEQ_RUN_JUMP = 1_000_000  # seq restarts at the agent's start time in ms x 1000: a new run jumps by far more


@dataclass
class FaultRun:
    """The session's stall and restart, and everything the agents sent (the whole session's topic) as streamed."""

    stall: Stall
    restart: Restart
    streamed: Streamed

    @property
    def stalled(self) -> int:
        return self.stall.broker

    @property
    def restarted(self) -> int:
        return self.restart.broker

    def events(self) -> list[dict[str, Any]]:
        return self.streamed.events

    def decisions(self, kind: str) -> list[dict[str, Any]]:
        with open_store(self.streamed.store) as store:
            return msgspec.to_builtins(drain(lambda **page: store.decisions(kind=kind, **page)))


@pytest.fixture(scope="module")
def fault_run(session_stall: Stall, session_restart: Restart, streamed: Streamed) -> FaultRun:
    return FaultRun(session_stall, session_restart, streamed)


def in_stall(run: FaultRun, ts: int) -> bool:
    """Strictly inside the stall, past what was in flight when it began."""
    return run.stall.stall_ms[0] + IN_FLIGHT_MS <= ts < run.stall.stall_ms[1]


def test_a_stalled_broker_is_fetched_from_by_no_leader_while_the_leaders_ticks_go_on(fault_run: FaultRun):
    run = fault_run
    events = run.events()
    fetches = [e for e in events if e["type"] == "fetch" and e["replica"] == run.stalled]
    assert {e["broker"] for e in fetches} == {1, 2, 3} - {run.stalled}  # its leaders report its fetches ...
    assert any(e["ts"] < run.stall.stall_ms[0] for e in fetches) and any(e["ts"] > run.stall.over_ms for e in fetches)
    assert not [e for e in fetches if in_stall(run, e["ts"])]  # ... and none while it is stopped
    # A stopped broker reports nothing; the others' isr-expiration runs go on (every 2.5 s at a 5 s lag).
    assert not [e for e in events if e["broker"] == run.stalled and in_stall(run, e["ts"])]
    for broker in {1, 2, 3} - {run.stalled}:
        ticks = [e for e in events if e["broker"] == broker and e["type"] == "tick" and in_stall(run, e["ts"])]
        assert len([t for t in ticks if t["task"] == "isr-expiration"]) >= 2, ticks
    # Each leader it follows wrote the shrink to ZooKeeper and said so (isr_updated, with Kafka's own judgement).
    shrunk = {
        (e["topic"], e["partition"])
        for e in events
        if e["type"] == "isr_updated"
        and e["kind"] == "shrink"
        and run.stalled in {o["replica"] for o in e["out_of_sync"]}
        and run.stall.stall_ms[0] <= e["ts"] <= run.stall.over_ms
    }
    assert shrunk == run.stall.follows


def test_isrwatch_on_the_events_topic_records_a_stuck_shrink_of_the_stalled_broker_and_its_expand(
    fault_run: FaultRun,
):
    run = fault_run
    shrinks = [
        d
        for d in run.decisions("shrink")
        if d["reasons"] == {str(run.stalled): "stuck"} and run.stall.stall_ms[0] <= d["ts"] <= run.stall.over_ms
    ]
    assert {(d["topic"], d["partition"]) for d in shrinks} == run.stall.follows, shrinks
    expands = [  # up to the lab healthy again: every leader had added it back
        d
        for d in run.decisions("expand")
        if d["replicas_changed"] == [run.stalled]
        and run.stall.stall_ms[1] - IN_FLIGHT_MS <= d["ts"] <= run.stall.window.end_ms
    ]
    assert {(d["topic"], d["partition"]) for d in expands} == run.stall.follows, expands


def test_a_restart_brings_leader_and_isr_from_the_new_leaders_and_after_catch_up_an_expand(fault_run: FaultRun):
    run = fault_run
    killed_ms, healthy_ms = run.restart.killed_ms, run.restart.window.end_ms  # from the kill to healthy again
    restarted_led = {key: run.restart.before[key].leader_epoch for key in run.restart.leads}
    events = [e for e in run.events() if killed_ms <= e["ts"] <= healthy_ms]
    # The controller moved the killed broker's leaderships: each new leader reports its LeaderAndIsr.
    moved = {
        (e["topic"], e["partition"]): e
        for e in events
        if e["type"] == "leader_and_isr" and e["broker"] == e["leader"] and e["leader"] != run.restarted
    }
    assert set(restarted_led) <= set(moved), sorted(moved)
    for key, epoch in restarted_led.items():
        assert moved[key]["leader_epoch"] > epoch and run.restarted not in moved[key]["isr"], moved[key]
    # Back, it caught up and every leader added it again (the brokers said so), and isrwatch decided the same.
    rejoined = {
        (e["topic"], e["partition"])
        for e in events
        if e["type"] == "isr_updated" and e["kind"] == "expand" and run.restarted not in e["isr_before"]
    }
    assert rejoined >= {k for k, s in run.restart.restarted.items() if run.restarted in s.replicas}, sorted(rejoined)
    decided = {
        (d["topic"], d["partition"])
        for d in run.decisions("expand")
        if d["replicas_changed"] == [run.restarted] and killed_ms <= d["ts"] <= healthy_ms
    }
    differ = decided ^ rejoined
    assert decided == rejoined, (
        sorted(decided),
        sorted(rejoined),
        [  # what the brokers and the model did with those partitions from the kill on, to tell why
            (e["ts"], e["broker"], e["type"], e.get("kind"), e.get("isr_before"), e.get("isr"), e.get("leader_epoch"))
            for e in events
            if (e.get("topic"), e.get("partition")) in differ and e["type"] in ("isr_updated", "leader_and_isr")
        ],
        [
            (d["ts"], d["kind"], d.get("isr_before"), d.get("isr_after"), d.get("replicas_changed"))
            for kind in ("shrink", "expand", "leader_and_isr")
            for d in run.decisions(kind)
            if (d["topic"], d["partition"]) in differ and killed_ms <= d["ts"] <= healthy_ms
        ],
    )
    accepted = [d for d in run.decisions("leader_and_isr") if killed_ms <= d["ts"] <= healthy_ms]
    assert set(restarted_led) <= {(d["topic"], d["partition"]) for d in accepted if d["leader"] != run.restarted}


def test_every_event_on_the_topic_is_valid_and_each_brokers_seq_strictly_increases_without_gaps(
    fault_run: FaultRun,
):
    seqs: dict[int, list[int]] = defaultdict(list)
    partition_of: dict[bytes | None, set[int]] = defaultdict(set)
    for record in fault_run.streamed.records:  # the whole session: every test's faults, restarts and elections
        event = parse_event(record.value, 0)
        assert not isinstance(event, DeadLetter), (event, record.value)
        assert record.key == str(event.broker).encode()  # keyed by broker: one broker's events stay in order
        partition_of[record.key].add(record.partition)
        seqs[event.broker].append(event.seq)
    assert sorted(seqs) == [1, 2, 3] and all(len(p) == 1 for p in partition_of.values())
    for broker, numbers in seqs.items():
        steps = [b - a for a, b in zip(numbers, numbers[1:], strict=False)]
        assert all(step > 0 for step in steps), f"broker {broker}: seq not strictly increasing"
        gaps = [step for step in steps if 1 < step <= SEQ_RUN_JUMP]
        assert not gaps, f"broker {broker}: {len(gaps)} seq gaps (events dropped): {gaps[:10]}"


COUNTERS = re.compile(r"isrwatch-agent: (?:stopped: )?captured=\d+ .*kafka\{written=(\d+) dropped=(\d+) failed=(\d+)")


def test_no_event_is_dropped_or_lost_at_lab_load(lab: Lab, fault_run: FaultRun):
    """The agent's own counters in each broker's stderr (every 10 s in the session lab): nothing dropped from a
    full queue, no send failed, no hook failed."""
    for broker in load(Path(lab.dir)).brokers:
        said = Path(broker.log).read_text()
        counters = [tuple(map(int, m.groups())) for m in COUNTERS.finditer(said)]
        assert counters and counters[-1][0] > 0, said[-2000:]
        assert all(dropped == 0 and failed == 0 for _, dropped, failed in counters), counters
        assert "hook_errors=0" in said and not re.search(r"hook_errors=[1-9]", said)
        assert "not instrumenting" not in said and "write failed" not in said


def test_the_fault_run_left_the_lab_healthy(fault_run: FaultRun):
    now = fault_run.restart.healthy  # after its election, healthy again
    assert all(s.leader == s.preferred_leader and set(s.isr) == set(s.replicas) for s in now.values()), now
