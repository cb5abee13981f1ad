"""isrwatch-agent on the session lab's real brokers: what it sends to the monitor broker's `isrwatch.events`
during a stall and a restart, and what isrwatch (the streaming job over that topic, `--profile agent`, into a
store) makes of it. The cluster's truth comes from ZooKeeper, never from isrwatch.

One fault run (a 10 s stall of one broker, then a restart of another, then a preferred election that puts the
leaders back) feeds every test; the lab is left healthy.
"""

from __future__ import annotations

import json
import re
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pytest

from state.config import Config
from state.events import DeadLetter, parse_event
from state.store import open_store
from streaming.job import JobOptions, StreamJob
from streaming.lab import faults
from streaming.lab.cluster import Lab, load
from tests.lab import (
    LAG_MS,
    Record,
    States,
    active_controller,
    current,
    end_offsets,
    every_record,
    fault_begins,
    fault_over,
    followed,
    led,
    states,
    wait_for,
    wait_healthy,
)

STALL_S = 10
# A fetch already being served when SIGSTOP lands, or parked in the leader's purgatory, carries a time up to
# replica.fetch.wait.max.ms (500 ms) after it; nothing may after that.
IN_FLIGHT_MS = 1000
SEQ_RUN_JUMP = 1_000_000  # seq restarts at the agent's start time in ms x 1000: a new run jumps by far more


@dataclass
class FaultRun:
    """What the module's fault run did, when, and everything the agents sent (the whole session's topic)."""

    stalled: int
    # Epoch ms (the brokers' clocks are this machine's): SIGSTOP was sent before stall_ms[0] and SIGCONT after
    # stall_ms[1], and the stall was over (its helper gone) at stall_over_ms.
    stall_ms: tuple[int, int]
    stall_over_ms: int
    stall_follows: set[tuple[str, int]]
    restarted: int
    killed_ms: int
    restarted_led: dict[tuple[str, int], int]  # partition -> its leader epoch before the kill
    started_at: dict[int, int]  # the events topic's end offsets when the run started
    records: list[Record] = field(default_factory=list)
    store: str = ""

    def events(self, since_run: bool = True) -> list[dict[str, Any]]:
        return [
            json.loads(r.value)
            for r in self.records
            if not since_run or r.offset >= self.started_at.get(r.partition, 0)
        ]

    def decisions(self, kind: str) -> list[dict[str, Any]]:
        with open_store(self.store) as store:
            return msgspec.to_builtins(store.decisions(kind=kind, since=self.stall_ms[0], limit=10_000).items)


def report(what: str, seconds: float) -> None:
    print(f"\n  {what}: {seconds:.1f} s", flush=True)


def stall(lab: Lab, broker: int) -> tuple[int, int, int]:
    """Stall the broker for STALL_S once its helper is done: a time after SIGSTOP, one before SIGCONT (the helper
    sleeps STALL_S once started, after `ends_ms` was set) and one after it."""
    said = faults.stall(Path(lab.dir), broker, STALL_S)
    stopped = int(time.time() * 1000)
    assert "SIGSTOP" in said
    [fault] = [f for f in current(lab).faults if f.kind == "stall"]
    fault_over(lab, "stall", timeout=(fault.ends_ms + 30_000) / 1000 - time.time())
    return stopped, fault.ends_ms, int(time.time() * 1000)


@pytest.fixture(scope="module")
def fault_run(lab: Lab, spark, tmp_path_factory: pytest.TempPathFactory) -> FaultRun:
    wait_healthy(lab)
    started = time.monotonic()
    before = states(lab)
    controller, _ = active_controller(lab)
    stalled = 2
    restarted = next(b.id for b in lab.brokers if b.id not in (stalled, controller) and led(before, b.id))
    started_at = end_offsets(lab)

    window = fault_begins("stall")
    *stall_ms, stall_over_ms = stall(lab, stalled)
    wait_healthy(lab)
    window.over()

    window = fault_begins("restart")
    killed_ms = int(time.time() * 1000)
    faults.restart(Path(lab.dir), restarted)  # SIGKILL; it starts again once ZooKeeper expired its session
    restarted_led = {key: before[key].leader_epoch for key in led(before, restarted)}
    wait_for(
        lab,
        f"broker {restarted}'s leaderships moved",
        lambda s: all(s[k].leader != restarted for k in restarted_led),
        timeout=60,
    )
    wait_healthy(lab)
    window.over()
    healthy_at = time.time()
    window = fault_begins("elect")
    faults.elect(Path(lab.dir))  # leaders back where they were: the lab as the next test expects it
    window.over()
    report("agent fault run (stall, restart, election)", time.monotonic() - started)

    # The stream settles an event once its cluster's newest event is allowed_lateness_ms (5 s) past it.
    time.sleep(max(0.0, healthy_at + 6 - time.time()))
    run = FaultRun(
        stalled=stalled,
        stall_ms=(stall_ms[0], stall_ms[1]),
        stall_over_ms=stall_over_ms,
        stall_follows=followed(before, stalled),
        restarted=restarted,
        killed_ms=killed_ms,
        restarted_led=restarted_led,
        started_at=started_at,
    )
    took = time.monotonic()
    run.records = every_record(lab)
    report(f"read {len(run.records):,} events from {lab.events_topic}", time.monotonic() - took)

    took = time.monotonic()
    work = tmp_path_factory.mktemp("agent-run")
    run.store = f"sqlite:///{work / 'isrwatch.db'}"
    StreamJob(
        JobOptions(
            source=f"kafka:{lab.monitor_bootstrap}/{lab.events_topic}",
            store=run.store,
            checkpoint=str(work / "checkpoint"),
            config=Config(replica_lag_time_max_ms=LAG_MS).with_profile("agent"),
            available_now=True,
        )
    ).run()
    report("isrwatch run --profile agent over the events topic", time.monotonic() - took)
    return run


def in_stall(run: FaultRun, ts: int) -> bool:
    """Strictly inside the stall, past what was in flight when it began."""
    return run.stall_ms[0] + IN_FLIGHT_MS <= ts < run.stall_ms[1]


def test_a_stalled_broker_is_fetched_from_by_no_leader_while_the_leaders_ticks_go_on(fault_run: FaultRun):
    run = fault_run
    events = run.events()
    fetches = [e for e in events if e["type"] == "fetch" and e["replica"] == run.stalled]
    assert {e["broker"] for e in fetches} == {1, 2, 3} - {run.stalled}  # its leaders report its fetches ...
    assert any(e["ts"] < run.stall_ms[0] for e in fetches) and any(e["ts"] > run.stall_over_ms for e in fetches)
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
        and run.stall_ms[0] <= e["ts"] <= run.stall_over_ms
    }
    assert shrunk == run.stall_follows


def test_isrwatch_on_the_events_topic_records_a_stuck_shrink_of_the_stalled_broker_and_its_expand(
    fault_run: FaultRun,
):
    run = fault_run
    shrinks = [
        d
        for d in run.decisions("shrink")
        if d["reasons"] == {str(run.stalled): "stuck"} and run.stall_ms[0] <= d["ts"] <= run.stall_over_ms
    ]
    assert {(d["topic"], d["partition"]) for d in shrinks} == run.stall_follows, shrinks
    expands = [
        d
        for d in run.decisions("expand")
        if d["replicas_changed"] == [run.stalled] and run.stall_ms[1] - IN_FLIGHT_MS <= d["ts"] < run.killed_ms
    ]
    assert {(d["topic"], d["partition"]) for d in expands} == run.stall_follows, expands


def test_a_restart_brings_leader_and_isr_from_the_new_leaders_and_after_catch_up_an_expand(
    lab: Lab, fault_run: FaultRun
):
    run = fault_run
    events = [e for e in run.events() if e["ts"] >= run.killed_ms]
    # The controller moved the killed broker's leaderships: each new leader reports its LeaderAndIsr.
    moved = {
        (e["topic"], e["partition"]): e
        for e in events
        if e["type"] == "leader_and_isr" and e["broker"] == e["leader"] and e["leader"] != run.restarted
    }
    assert set(run.restarted_led) <= set(moved), sorted(moved)
    for key, epoch in run.restarted_led.items():
        assert moved[key]["leader_epoch"] > epoch and run.restarted not in moved[key]["isr"], moved[key]
    # Back, it caught up and every leader added it again (the brokers said so), and isrwatch decided the same.
    rejoined = {
        (e["topic"], e["partition"])
        for e in events
        if e["type"] == "isr_updated" and e["kind"] == "expand" and run.restarted not in e["isr_before"]
    }
    assert rejoined >= {k for k, s in states(lab).items() if run.restarted in s.replicas}, sorted(rejoined)
    decided = {
        (d["topic"], d["partition"])
        for d in run.decisions("expand")
        if d["replicas_changed"] == [run.restarted] and d["ts"] >= run.killed_ms
    }
    assert decided == rejoined, (sorted(decided), sorted(rejoined))
    with open_store(run.store) as store:
        accepted = msgspec.to_builtins(store.decisions(kind="leader_and_isr", since=run.killed_ms, limit=1000).items)
    assert set(run.restarted_led) <= {(d["topic"], d["partition"]) for d in accepted if d["leader"] != run.restarted}


def test_every_event_on_the_topic_is_valid_and_each_brokers_seq_strictly_increases_without_gaps(
    fault_run: FaultRun,
):
    seqs: dict[int, list[int]] = defaultdict(list)
    partition_of: dict[bytes | None, set[int]] = defaultdict(set)
    for record in fault_run.records:  # the whole session: every test's faults, restarts and elections
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


def test_the_fault_run_left_the_lab_healthy(lab: Lab, fault_run: FaultRun):
    now: States = states(lab)
    assert all(s.leader == s.preferred_leader and set(s.isr) == set(s.replicas) for s in now.values()), now
