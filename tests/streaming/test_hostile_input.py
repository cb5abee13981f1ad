"""No bytes crash a reader: hostile lines through the commands themselves (`replay`, the file source of `run`,
the JSON files `simulate` and every command read). Each line ends as an event or a dead letter with a reason,
and the valid events give exactly the outputs they give alone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from isrwatch.cli import main
from isrwatch.state.config import Config
from isrwatch.store import open_store
from tests.support.hostile import CONFIG, SCENARIO, hostile_lines
from tests.support.jobs import dump, replay_of, run_job


def with_hostile_lines(tmp_path: Path) -> tuple[Path, Path, int]:
    """The scenario's events with the hostile lines between them (some after a BOM or with CRLF endings); also
    the scenario alone. Returns (hostile file, clean file, the number of valid lines among the hostile ones)."""
    valid = (SCENARIO.parent / f"{SCENARIO.name}.events.jsonl").read_bytes().splitlines()
    hostile = hostile_lines()
    mixed = [b"\xef\xbb\xbf" + valid[0]]  # a byte-order mark before the first line is tolerated
    for i, line in enumerate(valid[1:], start=1):
        mixed.append(line + (b"\r" if i % 3 == 0 else b""))
        if i - 1 < len(hostile):
            mixed.append(hostile[i - 1])
    mixed += hostile[len(valid) - 1 :]
    path = tmp_path / "hostile.jsonl"
    path.write_bytes(b"\n".join(mixed) + b"\n")
    clean = tmp_path / "clean.jsonl"
    clean.write_bytes(b"\n".join([*valid, hostile[-1]]) + b"\n")
    return path, clean, 1


def test_replay_takes_every_hostile_line_as_an_event_or_a_dead_letter(tmp_path: Path) -> None:
    hostile, clean, valid_hostile = with_hostile_lines(tmp_path)
    assert main(["replay", str(hostile), "--out", str(tmp_path / "h"), *CONFIG]) == 0
    assert main(["replay", str(clean), "--out", str(tmp_path / "c"), *CONFIG]) == 0
    got, want = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("h", "c"))
    assert got["lines"] == got["events"] + got["dead_letters"]
    assert got["events"] == want["events"] and got["dead_letters"] == len(hostile_lines()) - valid_hostile
    dead = [json.loads(line) for line in (tmp_path / "h" / "dead_letter.jsonl").read_text().splitlines()]
    assert all(d["reason"] for d in dead)
    reasons = " ".join(d["reason"] for d in dead)
    assert "invalid UTF-8" in reasons and "nested too deeply" in reasons
    for name in ("decisions", "propagations", "state"):
        assert (tmp_path / "h" / f"{name}.jsonl").read_text() == (tmp_path / "c" / f"{name}.jsonl").read_text()


def test_memory_stays_bounded_on_a_line_of_many_megabytes(tmp_path: Path) -> None:
    path = tmp_path / "huge.jsonl"
    line = b'{"type": "tick", "ts": 1, "x": "' + b"z" * (40 * 2**20) + b'"}'
    path.write_bytes(line + b"\n" + line[:-2] + b"\n")  # one valid event and one cut short, 40 MB each
    # The replay runs as the only child of a small parent that reports the child's peak resident memory.
    measure = (
        "import resource, subprocess, sys\n"
        "done = subprocess.run(sys.argv[1:])\n"
        "print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    argv = [sys.executable, "-m", "isrwatch.cli", "replay", str(path), "--out", str(tmp_path / "out")]
    proc = subprocess.run([sys.executable, "-c", measure, *argv], capture_output=True, text=True, timeout=300)
    code, peak_kb = map(int, proc.stdout.split())
    assert code == 0, proc.stderr
    peak_mb = peak_kb / 1024
    assert peak_mb < 600, f"replaying two 40 MB lines took {peak_mb:.0f} MB"
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert (summary["events"], summary["dead_letters"]) == (1, 1)


def test_the_file_source_of_run_takes_every_hostile_line_too(spark, tmp_path: Path) -> None:
    hostile, clean, valid_hostile = with_hostile_lines(tmp_path)
    inbox = tmp_path / "in"
    inbox.mkdir()
    hostile.rename(inbox / hostile.name)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    config = Config.from_dict(msgspec.json.decode(Path(CONFIG[1]).read_bytes()))
    run_job(inbox, url, tmp_path / "checkpoint", config, max_per_batch=None)
    got = dump(url)
    assert len(got["dead_letters"]) == len(hostile_lines()) - valid_hostile
    expected = replay_of(url, [clean])
    assert got["decisions"] == expected.decisions and got["propagations"] == expected.propagations
    assert got["partitions"] == expected.partitions
    with open_store(url) as store:
        reasons = [d["reason"] for d in store.dead_letters(limit=100).items]
    assert len(reasons) == len(hostile_lines()) - valid_hostile and all(reasons)


@pytest.mark.parametrize(
    "content, says",
    [
        (b"\xc9\xff not text", "not UTF-8 text"),
        (b"[" * 20_000 + b"]" * 20_000, "nested too deeply"),
        (b"{oops", "not JSON"),
        (b"\x00", "not JSON"),
    ],
)
def test_json_files_the_commands_read_fail_with_a_clear_error(
    tmp_path: Path, capsys, content: bytes, says: str
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    events = tmp_path / "e.jsonl"
    events.write_text("")
    for argv in (
        ["replay", str(events), "--out", str(tmp_path / "o"), "--config", str(bad)],
        ["simulate", "--speed", "0", "--duration", "1s", "--faults", str(bad)],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert says in err and str(bad) in err and "Traceback" not in err
