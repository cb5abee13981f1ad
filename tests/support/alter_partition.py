"""What AlterPartition brokers did, as the agent reports it, against what isrwatch modelled (SPEC §4.9, §7): their
requests one to one, their commits, and the latency the brokers saw. Shared by the recording's test
(tests/state/test_kraft_recording.py) and the reality suite on KRaft (tests/reality)."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable

# One request: its broker and its partitions' proposals (topic, partition, proposed ISR sorted, base epoch), sorted:
# the manager sends its items in the order of its ConcurrentHashMap (`new ArrayList<>(unsentIsrUpdates.values())`,
# DefaultAlterPartitionManager@4.4 L121), which no rule sets.
Request = tuple[int, tuple[tuple[str, int, tuple[int, ...], int], ...]]


# A proposal's partition at its base epoch: (broker, topic, partition, base partition epoch).
Proposal = tuple[int, str, int, int]


def _request(broker: int, items: Iterable[tuple[str, int, tuple[int, ...], int]], aside: set[Proposal]) -> Request:
    """A request's key: its broker and its items (topic, partition, proposed ISR sorted, base epoch), sorted, but the
    items of `aside`."""
    return broker, tuple(sorted(i for i in items if (broker, i[0], i[1], i[3]) not in aside))


def brokers_requests(
    events: Iterable[dict], deposed: set[tuple[int, int]] = frozenset(), aside: set[Proposal] = frozenset()
) -> Counter[Request]:
    """Every `alter_partition_sent` as a request, but those (broker, ts) the audit called `deposed`, and without the
    items of `aside` (a request left with none is not counted)."""
    requests = (
        _request(
            e["broker"],
            (
                (p.get("topic", ""), p["partition"], tuple(sorted(p["isr"])), p["partition_epoch"])
                for p in e["partitions"]
            ),
            aside,
        )
        for e in events
        if e["type"] == "alter_partition_sent" and (e["broker"], e["ts"]) not in deposed
    )
    return Counter(r for r in requests if r[1])


def models_requests(requests: Iterable[dict], aside: set[Proposal] = frozenset()) -> Counter[Request]:
    """The model's AlterPartition requests (`alter_partitions`, as JSON objects) in the same shape, without the items
    of `aside`."""
    keys = (
        _request(
            r["broker"],
            ((i["topic"], i["partition"], tuple(i["proposed_isr"]), i["partition_epoch"]) for i in r["partitions"]),
            aside,
        )
        for r in requests
    )
    return Counter(k for k in keys if k[1])


def timing_proposals(divergences: Iterable[dict]) -> set[Proposal]:
    """The partitions, at their base epochs, of each broker proposal the audit called `timing`, with the model's
    proposal it was paired with if any (which follower rejoined first: `both_expand`, `applying`, `fetch_order`; a
    proposal made again after its answer was ignored: `reproposed`): both sides' items of that partition from that
    epoch differ by the same timing, the pair's and any later proposal of it from that epoch, and the requests are
    compared without them (a KRaft leader proposed [1, 3] twice from one epoch where the model proposed [2, 3], then
    [1, 3]: which of the two pairs with the model's [2, 3] is arbitrary)."""
    timed = [
        d for d in divergences
        if d["kind"] == "timing" and (d.get("observed") or {}).get("type") == "alter_partition_proposal"
    ]  # fmt: skip
    # A side's `partition_epoch` is the epoch its commit would create: the base epoch + 1.
    theirs = {(d["broker"], d["topic"], d["partition"], d["observed"]["partition_epoch"] - 1) for d in timed}
    ours = {
        (d["model"]["broker"], d["topic"], d["partition"], d["model"]["partition_epoch"] - 1)
        for d in timed
        if d.get("model")
    }
    return theirs | ours


def deposed_requests(divergences: Iterable[dict]) -> set[tuple[int, int]]:
    """The brokers' requests the audit excused as `deposed` (sent by a broker no longer the leader), by (broker, ts)."""
    return {(d["broker"], d["observed"]["ts"]) for d in divergences if d.get("cause") == "deposed"}


def brokers_commits(events: Iterable[dict]) -> set[tuple[str, int, int, tuple[int, ...]]]:
    """(topic, partition, partition epoch, ISR) of every state the brokers committed, on either path: the response
    path (`isr_updated`) or the metadata path (`leader_and_isr` from KRaft metadata)."""
    return {
        (e["topic"], e["partition"], e["partition_epoch"], tuple(sorted(e["isr"])))
        for e in events
        if e["type"] in ("isr_updated", "leader_and_isr")
    }


def models_commits(requests: Iterable[dict]) -> set[tuple[str, int, int, tuple[int, ...]]]:
    """The same of every proposal the model had committed by an answer."""
    return {
        (i["topic"], i["partition"], i["committed_partition_epoch"], tuple(i["committed_isr"]))
        for r in requests
        for i in r["partitions"]
        if i["error"] is None and i["committed_isr"] is not None
    }


def latency_ms(events: list[dict]) -> tuple[float, float, int]:
    """AlterPartition latency as the brokers saw it: p50 and p99 (ms) from each request the agent saw sent to the
    first answer of its partitions by the same broker, and how many requests were answered."""
    answers: dict[tuple[int, str, int], list[int]] = {}
    for e in events:
        if e["type"] == "alter_partition_response":
            answers.setdefault((e["broker"], e["topic"], e["partition"]), []).append(e["ts"])
    took = []
    for e in events:
        if e["type"] != "alter_partition_sent" or not e["partitions"]:
            continue
        first = e["partitions"][0]
        later = [
            ts for ts in answers.get((e["broker"], first.get("topic", ""), first["partition"]), []) if ts >= e["ts"]
        ]
        if later:
            took.append(min(later) - e["ts"])
    if not took:
        return 0.0, 0.0, 0
    cuts = statistics.quantiles(took, n=100, method="inclusive") if len(took) > 1 else [took[0]] * 99
    return statistics.median(took), cuts[98], len(took)
