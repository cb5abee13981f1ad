"""The reality suite on KRaft (docs/SPEC.md §7): isrwatch against three real Kafka 4.4.0 KRaft nodes with
isrwatch-agent on each. It runs after the KRaft lab's tests (tests/lab/test_kraft.py) have put the cluster through
a stall, a fence, a throttled follower, kill and restart, a preferred election and a controller failover
(tests/support/lab.py KRAFT_FAULT_LOG; run alone, the missing ones run here), and before the ZooKeeper lab starts.
`isrwatch run --profile agent` streams everything the agents sent (the `kraft_streamed` fixture), and the suite holds
isrwatch to what the brokers did:
- its AlterPartition proposals and requests equal the brokers' (`alter_partition_sent`) one to one, and every commit
  it took is one the brokers applied, by the response path (`isr_updated`) or the metadata path (`leader_and_isr`);
- the audit finds no divergence but `timing`, each with its cause;
- every partition's ISR, leader and ELR from `GET /v1/partitions/{t}/{p}/isr` equal DescribeTopicPartitions';
- the brokers' `Shrinking ISR` lines match isrwatch's shrink proposals one to one.
The AlterPartition latency the brokers saw (p50, p99) is printed with each fault's figures.
"""

from __future__ import annotations

import sys
from collections import Counter

import msgspec
import pytest

from isrwatch.lab.record import Lab
from isrwatch.state.config import Config
from isrwatch.state.replay import ReplayResult, replay
from tests.support import alter_partition as ap
from tests.support.lab import KRAFT_FAULTS, LAG_MS, Streamed, current
from tests.support.reality import Reality, _kind, agent_events, in_window, say, served, shrink_lines, stored


@pytest.fixture(scope="module")
def kraft_reality(kraft_lab: Lab, kraft_streamed: Streamed) -> Reality:
    assert {w.kind for w in kraft_streamed.windows} >= set(KRAFT_FAULTS), kraft_streamed.windows
    lab = current(kraft_lab)
    return Reality(lab, kraft_streamed.store, kraft_streamed.windows, kraft_streamed.frontier, kraft_streamed.events)


@pytest.fixture(scope="module")
def replayed(kraft_reality: Reality) -> ReplayResult:
    """`isrwatch replay --profile agent` of the same events: the model's AlterPartition requests (not stored)."""
    lines = [msgspec.json.encode(e) for e in kraft_reality.events]
    return replay([lines], Config(replica_lag_time_max_ms=LAG_MS).with_profile("agent"))


def test_kraft_isrwatch_proposed_requested_and_committed_what_the_brokers_did(
    kraft_reality: Reality, replayed: ReplayResult
) -> None:
    divergences = stored(kraft_reality, "divergences")
    decisions = [d for d in stored(kraft_reality, "decisions") if d["kind"] in ("shrink", "expand")]
    sent = [e for e in kraft_reality.events if e["type"] == "alter_partition_sent"]
    for window in kraft_reality.windows:
        say(
            f"KRaft {window.kind}: {sum(in_window(d['ts'], window) for d in decisions)} isrwatch proposals, "
            f"{sum(len(e['partitions']) for e in sent if in_window(e['ts'], window))} broker proposals, divergences "
            f"{dict(Counter(_kind(d) for d in divergences if in_window(d['ts'], window)))}"
        )
    p50, p99, answered = ap.latency_ms(kraft_reality.events)
    say(f"KRaft AlterPartition latency as the brokers saw it: p50 {p50:.0f} ms, p99 {p99:.0f} ms ({answered} requests)")
    # The agent says of every refused answer whether its error was the whole request's (SPEC §3, §4.9 rule 9).
    refused = [e for e in kraft_reality.events if e["type"] == "alter_partition_response" and e.get("error")]
    assert [e for e in refused if not isinstance(e.get("top_level"), bool)] == []
    assert [d for d in divergences if (d["kind"] == "timing") != (d.get("cause") is not None)] == []
    wrong = [d for d in divergences if d["kind"] != "timing"]
    assert wrong == [], f"{wrong[:5]}\n{agent_events(kraft_reality, wrong)}"
    # The requests, one to one (a deposed leader's aside, and on both sides without the items of a partition whose
    # proposal the audit called timing, from that proposal's base epoch).
    requests = msgspec.to_builtins(replayed.alter_partitions)
    aside = ap.timing_proposals(divergences)
    theirs = ap.brokers_requests(kraft_reality.events, ap.deposed_requests(divergences), aside)
    ours = ap.models_requests(requests, aside)
    say(f"KRaft requests: {sum(theirs.values())} of the brokers', {sum(ours.values())} of isrwatch's")
    assert theirs == ours and sum(theirs.values()) >= 10
    # Every commit isrwatch took is one the brokers applied, on either path.
    commits = ap.models_commits(requests)
    missing = commits - ap.brokers_commits(kraft_reality.events)
    assert commits and not missing, sorted(missing)[:5]


def test_kraft_every_partitions_isr_leader_and_elr_are_describe_topics(kraft_reality: Reality) -> None:
    for state, got in served(kraft_reality):
        expected = (state.leader, sorted(state.isr), sorted(state.elr))
        assert (got["leader"], sorted(got["isr"]), sorted(got.get("elr") or [])) == expected, (
            state.topic,
            state.partition,
        )


def _history(reality: Reality, keys: set[tuple[int, str, int, tuple[int, ...]]]) -> str:
    """What a CI log needs to explain a shrink-line mismatch: for each (leader, partition) that differs, its leader's
    requests and answers, its metadata and isrwatch's shrinks of it, in time order."""
    lines = []
    for broker, topic, partition in sorted({k[:3] for k in keys}):
        rows = [(d["ts"], f"model shrink {d['isr_after']}") for d in stored(reality, "decisions", kind="shrink")
                if (d["leader"], d["topic"], d["partition"]) == (broker, topic, partition)]  # fmt: skip
        for e in reality.events:
            if e.get("broker") != broker:
                continue
            if e["type"] == "alter_partition_sent":
                rows += [(e["ts"], f"sent {p['isr']} epoch {p['partition_epoch']}") for p in e["partitions"]
                         if (p.get("topic"), p["partition"]) == (topic, partition)]  # fmt: skip
            elif (e.get("topic"), e.get("partition")) == (topic, partition) and e["type"] in (
                "alter_partition_response", "leader_and_isr", "isr_updated"
            ):  # fmt: skip
                detail = e.get("error") or f"{e.get('isr')} epoch {e.get('partition_epoch')}"
                rows.append((e["ts"], f"{e['type']} {detail}"))
        lines.append(f"-- broker {broker} {topic}-{partition}:")
        lines += [f"  {ts} {what}" for ts, what in sorted(rows)[:60]]
    return "\n".join(lines)


def test_kraft_the_brokers_shrink_lines_match_isrwatchs_shrink_proposals_one_to_one(kraft_reality: Reality) -> None:
    logged: Counter[tuple[int, str, int, tuple[int, ...]]] = Counter()
    for (broker, topic, partition, _, after), n in shrink_lines(kraft_reality).items():
        logged[(broker, topic, partition, after)] += n  # a proposal's ISR before may not be the model's: not compared
    ours = Counter(
        (d["leader"], d["topic"], d["partition"], tuple(d["isr_after"]))
        for d in stored(kraft_reality, "decisions", kind="shrink")
        if d["ts"] < kraft_reality.settled
    )
    # A deposed leader's shrink (a fenced or restarted broker, resumed from old metadata) is logged and proposed, then
    # refused: the audit names it (resends of it repeat the proposal, not the line).
    deposed = Counter(
        (d["broker"], d["topic"], d["partition"], tuple(d["observed"]["isr"]))
        for d in stored(kraft_reality, "divergences", cause="deposed")
        if d["observed"]["kind"] == "shrink" and d["ts"] < kraft_reality.settled
    )
    print(f"reality: KRaft shrink lines {sum(logged.values())}, isrwatch's {sum(ours.values())}", file=sys.stderr)
    assert sum(logged.values()) > 0
    expected = ours + deposed  # a sum: a partition may have both (Counter's `|` keeps the larger count)
    differing = {k for k in logged.keys() | expected.keys() if logged[k] != expected[k]}
    assert logged == expected, _history(kraft_reality, differing)
