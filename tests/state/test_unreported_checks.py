"""SPEC §4.7, a check the run did not report: once a leader reported a check of a partition, its runs that report
their end check it only where they report (`partition.tick_checks`)."""

from __future__ import annotations

from pathlib import Path

from isrwatch.state.config import Config
from isrwatch.state.records import DecisionKind
from isrwatch.state.replay import replay

# docs/evidence/zk-slow-early-shrink: leader 3's events of orders-3 (its LeaderAndIsr, then 145.5-151 s and 168-178.1 s)
# and its isr-expiration ticks of 168-178.1 s, from the Kafka 3.9 reality suite's "slow" fault of 2026-11-29.
SLOW_EARLY_SHRINK = Path(__file__).parent / "data" / "zk-slow-early-shrink.jsonl"
_WRITES = (DecisionKind.SHRINK, DecisionKind.EXPAND)


def test_a_run_that_did_not_report_its_check_of_a_partition_shrinks_nothing_there() -> None:
    """Broker 3 resumes from an 8 s pause; its run of .737-.818 checks orders-3 without reporting it (it read the LEO
    1179 the fetches had reported, both followers at it) and shrinks payments-0 and orders-0. Fetches during the run
    raise the LEO to 1187 with follower 2 at 1180, last caught up at 169562. The model checked orders-3 at the run's
    end with them all and shrank 2, 20 s before the broker did. Now the run does not check it: the agent reports every
    check that shrinks. The leader's two ISR writes of the excerpt stay the model's, and nothing else is."""
    config = Config(replica_lag_time_max_ms=5000).with_profile("agent")
    with open(SLOW_EARLY_SHRINK, "rb") as lines:
        result = replay([lines], config, until=1_795_938_240_000)  # past the audit's window: every write is judged
    writes = [(d.ts, d.kind, d.isr_before, d.isr_after) for d in result.decisions if d.kind in _WRITES]
    assert writes == [
        (1_795_938_150_431, DecisionKind.SHRINK, [1, 2, 3], [2, 3]),
        (1_795_938_169_089, DecisionKind.EXPAND, [2, 3], [1, 2, 3]),
    ]
    assert result.summary["divergences_by_kind"] == {}
