"""The demo's terminal lines (cli/demo.py `Summary`), read from a real `isrwatch serve` over a store that a real
replay filled: a proposal reads PROPOSE, then COMMIT or REFUSED with Kafka's error, a run of the same refusal is one
line, KRaft's controller changes read as metadata, and times are on the status page's clock."""

from __future__ import annotations

import json
import time
from pathlib import Path

from isrwatch.cli import main
from isrwatch.cli.demo import Api, Summary, _clock, _offset
from tests.support.kraft import CLUSTER, UNTIL, kraft_events, settings_args
from tests.support.net import serving

REFUSALS = 12  # the leader of ledger-3 proposes broker 1 back at each fetch; the controller refuses each


def test_offsets_round_before_they_carry_into_the_minute() -> None:
    assert [_offset(ms, 0) for ms in (0, 59_949, 59_970, 60_000, 119_949, 754_321)] == [
        "+0:00.0",
        "+0:59.9",
        "+1:00.0",
        "+1:00.0",
        "+1:59.9",
        "+12:34.3",
    ]


def test_the_terminal_clock_is_the_pages() -> None:
    """The page's `clock` (api/static/app.js): local HH:MM:SS.mmm of the event time."""
    ms = 1_795_920_000_123
    assert _clock(ms) == time.strftime("%H:%M:%S", time.localtime(ms // 1000)) + ".123"
    assert _clock(None) == "-"


def _refused_again(events: list[dict]) -> list[dict]:
    """The KRaft cluster of tests/support/kraft.py, with the controller refusing ledger-3's expand REFUSALS times
    (INELIGIBLE_REPLICA: broker 1 fenced, which the leader's metadata learns only at the end of the run)."""
    before = [e for e in events if e["ts"] < 5000]
    after = [e for e in events if e["ts"] >= 5500]  # the unfence, then the proposal that commits
    run = []
    for k in range(REFUSALS):
        at = 5000 + k * 40
        fetch = {"type": "fetch", "ts": at, "topic": "ledger", "partition": 3, "replica": 1}
        run.append({**fetch, "fetch_offset": 100, "leader_leo": 100, "cluster": CLUSTER})
        answer = {"type": "alter_partition_response", "ts": at + 10, "topic": "ledger", "partition": 3, "broker": 2}
        run.append({**answer, "error": "INELIGIBLE_REPLICA", "cluster": CLUSTER})
    return before + run + after


def test_proposals_their_answers_and_a_run_of_refusals_read_as_such(tmp_path: Path) -> None:
    events = tmp_path / "kraft.jsonl"
    events.write_text("".join(json.dumps(e) + "\n" for e in _refused_again(kraft_events())))
    store = f"sqlite:///{tmp_path / 'isrwatch.db'}"
    assert main(["replay", str(events), *settings_args(), "--until", str(UNTIL), "--store", store]) == 0
    lines: list[str] = []
    with serving(store) as base:
        summary = Summary(Api(base), 0, lines.append, metadata=True)
        summary.tick()
        summary.tick()  # a look that brings no more of the refusals tells their run
    told = "\n".join(lines)
    assert "SHRINK" not in told and "EXPAND" not in told  # proposals, not writes
    proposed = [line.split()[:3] for line in lines if "PROPOSE" in line and "again" not in line]
    assert proposed.count(["PROPOSE", "shrink", "ledger-0"]) == proposed.count(["PROPOSE", "shrink", "ledger-1"]) == 1
    assert proposed.count(["PROPOSE", "expand", "ledger-3"]) == 1  # a repeated thing is said once
    assert f"PROPOSE expand ledger-3 by leader 2 again, {REFUSALS} more times until {_clock(6000)}" in told
    assert f"COMMIT  broker 2's request answered after 20 ms: ledger-2 [1,2,3] epoch 1 (at {_clock(3020)})" in told
    [refused] = [line for line in lines if "REFUSED" in line]
    span = (REFUSALS - 1) * 40 / 1000
    assert refused == (
        f"  REFUSED broker 2: {REFUSALS} answers INELIGIBLE_REPLICA in {span:.1f} s, the ISR stays as committed: "
        f"ledger-3 (at {_clock(5010)})"
    )
    assert "METADATA  4 accepted: ledger-" in told and "LEADER_AND_ISR" not in told
    assert summary.outcome(alter_partition=True) == (
        f"{REFUSALS + 4} ISR changes proposed (2 committed, {REFUSALS} refused), 4 metadata changes accepted, "
        "0 rejected"
    )
