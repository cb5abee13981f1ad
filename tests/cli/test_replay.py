"""`isrwatch replay` as users call it: options, outputs, errors, what-if replays, progress."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from isrwatch.state.config import Config, ConfigError

SCENARIOS = Path(__file__).parents[1] / "scenarios"
STUCK = SCENARIOS / "01-stuck-follower-shrink.events.jsonl"


def isrwatch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "isrwatch.cli", *args], capture_output=True, text=True, timeout=120)


def test_help_explains_every_option() -> None:
    proc = isrwatch("replay", "--help")
    assert proc.returncode == 0
    for option in (
        "--out",
        "--config",
        "--set",
        "--until",
        "--engine",
        "replica_lag_time_max_ms",
        "isr_change_linger_ms",
        "min_insync_replicas_by_topic",
    ):
        assert option in proc.stdout


def test_outputs_and_summary(tmp_path: Path) -> None:
    proc = isrwatch(
        "replay",
        str(STUCK),
        "--set",
        "replica_lag_time_max_ms=10000",
        "--until",
        "25000",
        "--out",
        str(tmp_path / "out"),
    )
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == [
        "dead_letter.jsonl",
        "decisions.jsonl",
        "incidents.jsonl",
        "propagations.jsonl",
        "state.jsonl",
        "summary.json",
    ]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["decisions_by_kind"] == {"leader_and_isr": 1, "shrink": 1}
    assert summary["shrinks_by_reason"] == {"stuck": 1}
    assert summary["propagations_by_trigger"] == {"linger": 1}
    assert summary["events"] == summary["lines"] == 10
    assert summary["events_per_second"] > 0
    assert summary["config"]["replica_lag_time_max_ms"] == 10000
    assert "10 lines, 10 events" in proc.stderr
    incidents = [json.loads(line) for line in (out / "incidents.jsonl").read_text().splitlines()]
    assert [(i["kind"], i["brokers"], i["opened_ms"], i["closed_ms"], i["partition_count"]) for i in incidents] == [
        ("stuck", [3], 15000, None, 1)
    ]
    assert incidents[0]["summary"] == (
        "broker 3 stopped fetching: removed as stuck from 1 partition by leader 1; none under min ISR; not over yet"
    )


def test_what_if_a_longer_lag_avoids_the_shrink(tmp_path: Path) -> None:
    short = isrwatch(
        "replay", str(STUCK), "--set", "replica_lag_time_max_ms=10000", "--until", "25000", "--out", str(tmp_path / "a")
    )
    long = isrwatch(
        "replay", str(STUCK), "--set", "replica_lag_time_max_ms=30000", "--until", "25000", "--out", str(tmp_path / "b")
    )
    assert short.returncode == long.returncode == 0
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["decisions_by_kind"].get("shrink") == 1
    assert "shrink" not in json.loads((tmp_path / "b" / "summary.json").read_text())["decisions_by_kind"]


def test_several_files_and_dead_letters(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "fetch", "ts": "x"}\n\n{oops\n')
    proc = isrwatch("replay", str(STUCK), str(bad), "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    dead = [json.loads(line) for line in (tmp_path / "out" / "dead_letter.jsonl").read_text().splitlines()]
    assert [d["field"] for d in dead] == ["ts", None]
    assert all(d["raw"] and d["reason"] for d in dead)


def test_events_after_until_are_reported(tmp_path: Path) -> None:
    proc = isrwatch("replay", str(STUCK), "--until", "5000", "--out", str(tmp_path))
    assert proc.returncode == 0
    assert json.loads((tmp_path / "summary.json").read_text())["events_after_until"] == 5
    assert "were not applied" in proc.stderr


def test_now_refuses_an_event_dated_past_max_future_and_without_it_replay_trusts_its_input(tmp_path: Path) -> None:
    """A broker with a wrong clock: its year-ahead tick must not run a year of checks (SPEC §6)."""
    year_ahead = 5000 + 365 * 24 * 3600 * 1000
    events = tmp_path / "events.jsonl"
    events.write_text(STUCK.read_text() + json.dumps({"type": "tick", "ts": year_ahead}) + "\n")
    judged = isrwatch("replay", str(events), "--now", "20000", "--out", str(tmp_path / "now"))
    assert judged.returncode == 0, judged.stderr
    [dead] = [json.loads(line) for line in (tmp_path / "now" / "dead_letter.jsonl").read_text().splitlines()]
    assert (dead["field"], dead["ts"]) == ("ts", year_ahead) and dead["reason"].startswith("ts_in_future")
    summary = json.loads((tmp_path / "now" / "summary.json").read_text())
    assert summary["until"] < year_ahead
    trusted = isrwatch("replay", str(events), "--out", str(tmp_path / "trusted"))
    assert trusted.returncode == 0, trusted.stderr
    assert (tmp_path / "trusted" / "dead_letter.jsonl").read_text() == ""
    assert json.loads((tmp_path / "trusted" / "summary.json").read_text())["until"] == year_ahead


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "replica_lag_time_max_ms=abc"], "is not JSON"),
        (["--set", "no_such_key=1"], "unknown config key 'no_such_key'"),
        (["--set", "replica_lag_time_max_ms=0"], "must be >= 1"),
        (["--set", "isr_change_linger_ms"], "expected KEY=VALUE"),
        (["--config", "/nonexistent.json"], "--config /nonexistent.json"),
    ],
)
def test_bad_configuration_is_a_clear_error(args: list[str], message: str, tmp_path: Path) -> None:
    proc = isrwatch("replay", str(STUCK), "--out", str(tmp_path), *args)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_events_file_is_a_clear_error(tmp_path: Path) -> None:
    proc = isrwatch("replay", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path))
    assert proc.returncode == 2 and "no such file" in proc.stderr


def test_progress_lines_for_large_inputs(tmp_path: Path) -> None:
    from isrwatch.sim.synthetic import StreamShape, generate

    path = tmp_path / "big.jsonl"
    with path.open("w") as fh:
        for ev in generate(StreamShape(partitions=2000), 520_000):
            fh.write(json.dumps(ev) + "\n")
    proc = isrwatch("replay", str(path), "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert "parsed 500,000 lines" in proc.stderr


def test_config_defaults_follow_kafka() -> None:
    config = Config()
    assert (config.replica_lag_time_max_ms, config.expiration_interval_ms) == (30000, 15000)
    assert Config(replica_lag_time_max_ms=10001).expiration_interval_ms == 5000
    assert Config(isr_expiration_interval_ms=0).expiration_interval_ms == 0
    assert Config(min_insync_replicas=2, min_insync_replicas_by_topic={"t": 3}).min_isr("t") == 3
    with pytest.raises(ConfigError, match="min_insync_replicas_by_topic"):
        Config.from_dict({"min_insync_replicas_by_topic": {"t": 0}})
    with pytest.raises(ConfigError, match="must be an integer"):
        Config.from_dict({"isr_change_linger_ms": True})
