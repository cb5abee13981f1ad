"""SPEC §4.9, a ZooKeeper write in flight (3.1+, with the agent): the leader's write reported before the model
decided it (`partition.reported_ahead`)."""

from __future__ import annotations

from pathlib import Path

from isrwatch.state.config import Config
from isrwatch.state.records import DecisionKind, IsrState
from isrwatch.state.replay import replay

# docs/evidence/zk-expand-before-fetch: leader 2's events of payments-1 and its isr-expiration ticks, 32 s of the
# Kafka 3.9 session lab of 2026-11-29 (a clean-clone CI run's reality suite).
EXPAND_BEFORE_FETCH = Path(__file__).parent / "data" / "zk-expand-before-fetch.jsonl"


def test_a_write_the_leader_reported_before_the_model_decided_it_commits_with_the_models() -> None:
    """Leader 2 reports its expand of replica 1 ([2, 3] -> [1, 2, 3], epoch 9) at .903, judged against an HW
    another fetch had not raised yet; the model decides the same write at .925 on 1's next fetch. The model's write
    commits at once on the report that came ahead. Before, the report was ignored (nothing in flight) and the model's
    write waited for it for ever: pending_expand at epoch 8, the stored ISR [2, 3] where ZooKeeper had [1, 2, 3]."""
    config = Config(replica_lag_time_max_ms=5000).with_profile("agent")
    with open(EXPAND_BEFORE_FETCH, "rb") as lines:
        result = replay([lines], config)
    expands = [(d.ts, d.isr_before, d.isr_after) for d in result.decisions if d.kind == DecisionKind.EXPAND]
    assert expands == [(1_795_937_306_925, [2, 3], [1, 2, 3])]
    [state] = [r for r in result.records if (r.topic, r.partition) == ("payments", 1)]
    assert (state.isr, state.partition_epoch) == ([1, 2, 3], 9)
    assert state.isr_state in (None, IsrState.COMMITTED)
    assert result.summary["divergences_by_kind"] == {}
