"""Exact when a broker stalls (SPEC §6, `frontier.holds_back`): the events a broker's agent captured just before
the broker stopped (SIGSTOP, a long GC pause) reach isrwatch only when it resumes, seconds after the other brokers'
streams moved on. They are applied in their place, not dead-lettered as late: the stream still equals a one-pass
replay of the same lines, whatever the micro-batch cuts (the input: tests/stalls.py)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from isrwatch.state.replay import replay
from isrwatch.streaming.testing import run_stateful
from tests.support.stalls import BROKERS, CONFIG, late_letters, outputs, stall_lines


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    stalled=st.sampled_from(BROKERS),
    stall_ms=st.sampled_from([6000, 9000, 12_000]),
    caught=st.sampled_from([50, 200, 500]),
    seed=st.integers(0, 2**16),
    buckets=st.integers(1, 4),
    data=st.data(),
)
def test_a_stalled_brokers_last_events_arrive_when_it_resumes_and_are_applied_in_their_place(
    stalled: int, stall_ms: int, caught: int, seed: int, buckets: int, data: st.DataObject
) -> None:
    """Whatever the cuts: nothing is late, and the stream's outputs are the one-pass replay's."""
    lines = stall_lines(stalled, stall_ms, caught, seed)
    cuts = data.draw(st.lists(st.integers(1, len(lines) - 1), max_size=12))
    streamed = run_stateful(lines, cuts, CONFIG, buckets)
    assert [d.to_record() for d in streamed.dead_letters] == []
    assert outputs(streamed) == outputs(replay([lines], CONFIG))


def test_without_the_stall_wait_the_stalled_brokers_last_events_are_late() -> None:
    """Why `broker_stall_wait_ms`: with a broker holding back only for `allowed_lateness_ms` (the rule before it),
    the other streams move the frontier past the stalled broker's last events before they come: late, and the
    stream no longer equals the replay. With the wait (the test above, same input), nothing is late."""
    lines = stall_lines(stalled=2, stall_ms=9000, caught=500, seed=7)
    cuts = list(range(50, len(lines), 50))
    before = replace(CONFIG, broker_stall_wait_ms=CONFIG.allowed_lateness_ms)
    late = late_letters(run_stateful(lines, cuts, before))
    assert late and {ev["broker"] for ev in late} == {2}
    assert late_letters(run_stateful(lines, cuts, CONFIG)) == []
