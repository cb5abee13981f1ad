"""The reality suite (docs/SPEC.md §7): isrwatch against a real Kafka 3.9 cluster with isrwatch-agent on every
broker. It runs last on the session lab, after the lab's and the agent's tests have put the cluster through every
fault the issue names (tests/support/lab.py FAULT_LOG; run alone, this module runs the missing ones itself):

- a stalled broker (its followers are shrunk as stuck),
- a throttled follower (a follower that fell behind catches up slowly: slow),
- kill and restart (LeaderAndIsr, then expands),
- a preferred leader election,
- a controller failover (a new controller epoch; stale epochs),

then `isrwatch run` streams everything the agents sent during the session (Spark's Kafka source over
`isrwatch.events`, `--profile agent`) into a store (tests/support/lab.py stream_session, the `streamed` fixture the
agent's tests share), and the suite holds isrwatch to what the brokers did:
- its shrink/expand decisions and propagation batches equal the brokers' own (`isr_updated`,
  `isr_change_propagated`): the audit finds no divergence but `timing`;
- at the end, the ISR and leader `GET /v1/partitions/{t}/{p}/isr` returns equal ZooKeeper's
  `/brokers/topics/T/partitions/P/state`, for every partition;
- the shrink lines of the brokers' `server.log` match isrwatch's shrinks one to one.

Each fault's figures (decisions matched, divergences by kind) are printed for the closing note; the events the
agents sent are kept in the session's base temp dir (`reality-events.jsonl`) for `isrwatch replay --profile agent`.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from isrwatch.lab.record import Lab
from tests.support.lab import FAULTS, Streamed, current
from tests.support.reality import Reality, _kind, agent_events, in_window, say, served, shrink_lines, stored


@pytest.fixture(scope="module")
def reality(lab: Lab, streamed: Streamed) -> Reality:
    assert {w.kind for w in streamed.windows} >= set(FAULTS), streamed.windows
    return Reality(current(lab), streamed.store, streamed.windows, streamed.frontier, streamed.events)


TIMING_SHARE = 0.1  # at most this share of the brokers' settled ISR writes may be timing divergences
NEAR_MS = 1000  # `around`: the leader's own events this close to an ISR divergence are shown one by one


def _near(ev: dict, divergence: dict) -> bool:
    """An event of the divergence's partition that its decision read: a fetch of a follower in its evidence, an
    append (the LEO a check read), or the broker's isr-expiration run."""
    if ev["type"] == "tick":
        return ev.get("task") == "isr-expiration"
    if divergence["subject"] != "isr" or (ev.get("topic"), ev.get("partition")) != (
        divergence["topic"],
        divergence["partition"],
    ):
        return False
    followers = {e["replica"] for e in divergence.get("evidence") or []}
    return ev["type"] == "append" or (ev["type"] == "fetch" and ev["replica"] in followers)


def _brief(ev: dict) -> str:
    """One event in a line: its type, seq and the fields the model reads."""
    fields = ("replica", "fetch_offset", "leader_leo", "check_ms", "end_ms")
    return f"{ev['type']} seq {ev.get('seq')} " + " ".join(f"{f}={ev[f]}" for f in fields if f in ev)


def around(reality: Reality, divergence: dict, before_ms: int = 15_000, after_ms: int = 10_000) -> str:
    """What a CI log needs to explain a divergence without the session's files: the broker's reported propagation
    runs and ISR writes near it, the model's decisions and batches for that broker (or partition), and the audit's
    timing divergences there with the rule that excused each (a real one may follow a timing one)."""
    lo, hi = divergence["ts"] - before_ms, divergence["ts"] + after_ms
    broker, where = divergence["broker"], (divergence["topic"], divergence["partition"])

    def concerned(write: dict) -> bool:  # a broker's or the model's ISR write: of the partition, or of the broker
        if divergence["subject"] == "isr":
            return (write["topic"], write["partition"]) == where
        return write["leader"] == broker

    lines = [f"-- around {_kind(divergence)} {divergence['subject']} at {divergence['ts']} (broker {broker}):"]
    for ev in reality.events:
        if not lo <= ev["ts"] <= hi:
            continue
        if ev["type"] == "tick" and ev.get("task") == "isr-change-propagation" and ev.get("broker") == broker:
            lines.append(f"  {ev['ts']} broker run: L {ev.get('last_isr_change_ms')} P {ev.get('last_propagation_ms')}")
        elif ev["type"] == "isr_updated" and concerned(ev):
            lines.append(
                f"  {ev['ts']} broker commit {ev['topic']}-{ev['partition']} {ev['kind']} {ev['isr']} "
                f"epoch {ev['partition_epoch']} check {ev.get('check_ms')}"
            )
        elif ev["type"] == "isr_change_propagated" and ev["broker"] == broker:
            lines.append(f"  {ev['ts']} broker batch {[(p['topic'], p['partition']) for p in ev['partitions']]}")
        elif abs(ev["ts"] - divergence["ts"]) <= NEAR_MS and ev.get("broker") == broker and _near(ev, divergence):
            lines.append(f"  {ev['ts']} broker {_brief(ev)}")
    for d in stored(reality, "decisions"):
        if lo <= d["ts"] <= hi and d["kind"] in ("shrink", "expand") and concerned(d):
            lines.append(f"  {d['ts']} model {d['kind']} {d['topic']}-{d['partition']} {d['isr_after']}")
    for d in stored(reality, "divergences", kind="timing"):
        if lo <= d["ts"] <= hi and d["broker"] == broker:
            where_d = f"{d['topic']}-{d['partition']}" if d["subject"] == "isr" else "batch"
            lines.append(f"  {d['ts']} audit {_kind(d)} {where_d} margin {d['margin_ms']}")
    for b in stored(reality, "propagations"):
        if lo <= b["ts"] <= hi and b["broker"] == broker:
            tps = [(p["topic"], p["partition"]) for p in b["partitions"]]
            lines.append(f"  {b['ts']} model batch {tps} {b['trigger']} {b['first_change_ts']}..{b['last_change_ts']}")
    return "\n".join([lines[0], *sorted(lines[1:])])  # each line after the first starts with its 13-digit ms


def test_isrwatch_decided_what_the_brokers_did(reality: Reality) -> None:
    divergences = stored(reality, "divergences")
    observed = stored(reality, "observed")
    decisions = [d for d in stored(reality, "decisions") if d["kind"] in ("shrink", "expand")]
    updates = [o for o in observed if o["type"] == "isr_updated"]
    for window in reality.windows:
        say(
            f"{window.kind}: {sum(in_window(d['ts'], window) for d in decisions)} isrwatch decisions, "
            f"{sum(in_window(o['ts'], window) for o in updates)} broker ISR writes, divergences "
            f"{dict(Counter(_kind(d) for d in divergences if in_window(d['ts'], window)))}"
        )
    assert updates and any(d["kind"] == "shrink" for d in decisions)
    assert [d for d in divergences if (d["kind"] == "timing") != (d.get("cause") is not None)] == []
    wrong = [d for d in divergences if d["kind"] != "timing"]
    around_them = [around(reality, d)[:3000] for d in wrong[:3]]
    assert wrong == [], "\n".join([json.dumps(wrong)[:3000], *around_them, agent_events(reality, wrong)])
    # Every settled ISR write, the brokers' and the model's, has its partner: the same leader, partition, kind and
    # new ISR; only the sides a timing divergence concerns are set aside (their partner may be a run away): the
    # broker's write of that partition and epoch, the model's write it was judged with.
    timed = [d for d in divergences if d["subject"] == "isr"]
    theirs_timed = {(o["topic"], o["partition"], o["partition_epoch"]) for d in timed if (o := d.get("observed"))}
    ours_timed = {(w["topic"], w["partition"], w["ts"], w["kind"]) for d in timed if (w := d.get("model"))}
    settled = [o for o in updates if o["ts"] < reality.settled]
    theirs = Counter(
        (o["leader"], o["topic"], o["partition"], o["kind"], tuple(sorted(o["isr"])))
        for o in settled
        if (o["topic"], o["partition"], o["partition_epoch"]) not in theirs_timed
    )
    ours = Counter(
        (d["leader"], d["topic"], d["partition"], d["kind"], tuple(d["isr_after"]))
        for d in decisions
        if d["ts"] < reality.settled and (d["topic"], d["partition"], d["ts"], d["kind"]) not in ours_timed
    )
    say(f"ISR writes: {sum(theirs.values())} of the brokers' matched by isrwatch's, {len(timed)} timing aside")
    assert theirs == ours and sum(theirs.values()) >= 10
    # Timing is the exception: a small share of the brokers' writes.
    assert len(timed) <= TIMING_SHARE * len(settled), (len(timed), len(settled))
    # And every settled batch (its broker and partitions), timing ones aside.
    timed_batches = {(d["broker"], d["ts"]) for d in divergences if d["subject"] == "propagation"}
    sent = Counter(
        (o["broker"], tuple((p["topic"], p["partition"]) for p in o["partitions"]))
        for o in observed
        if o["type"] == "isr_change_propagated"
        and o["ts"] < reality.settled
        and (o["broker"], o["ts"]) not in timed_batches
    )
    modelled = Counter(
        (p["broker"], tuple((q["topic"], q["partition"]) for q in p["partitions"]))
        for p in stored(reality, "propagations")
        if p["ts"] < reality.settled and (p["broker"], p["ts"]) not in timed_batches
    )
    say(f"batches: {sum(sent.values())} of the brokers' matched by isrwatch's")
    assert sent == modelled and sum(sent.values()) >= 3


def test_every_partitions_isr_and_leader_are_zookeepers(reality: Reality) -> None:
    for state, got in served(reality):
        assert (got["leader"], sorted(got["isr"])) == (state.leader, sorted(state.isr)), (state.topic, state.partition)


def test_the_brokers_shrink_lines_match_isrwatchs_shrinks_one_to_one(reality: Reality) -> None:
    logged = shrink_lines(reality)
    ours = Counter(
        (d["leader"], d["topic"], d["partition"], tuple(d["isr_before"]), tuple(d["isr_after"]))
        for d in stored(reality, "decisions", kind="shrink")
        if d["ts"] < reality.settled
    )
    # A shrink a timing divergence concerns, as its side wrote it (leader, partition, ISR before and after), may
    # differ from the other side's.
    timing = {
        (side["leader"] if "leader" in side else side["broker"], d["topic"], d["partition"],
         tuple(sorted(side.get("isr_before") or ())), tuple(sorted(side["isr"])))
        for d in stored(reality, "divergences", kind="timing", subject="isr")
        for side in (d.get("model"), d.get("observed"))
        if side and side["kind"] == "shrink"
    }  # fmt: skip
    assert sum(logged.values()) > 0
    differ = (logged - ours) + (ours - logged)
    assert all(key in timing for key in differ), differ
