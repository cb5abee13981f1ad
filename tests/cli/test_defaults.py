"""One set of defaults: `run`, `serve`, `replay --store` and `demo` share one store; `serve` over a store nothing
wrote says so; `--version`; each subcommand's usage error names that subcommand."""

from __future__ import annotations

import re
import subprocess
import sys
from contextlib import AbstractContextManager
from importlib.metadata import version
from pathlib import Path

import httpx
import pytest

from isrwatch.api.routers.health import NO_BATCH
from isrwatch.cli import build_parser, demo, main
from isrwatch.store import DEFAULT_STORE, STORE_ENV, open_store
from tests.support.net import serving_command
from tests.support.replays import replay_scenario

CLI = [sys.executable, "-m", "isrwatch.cli"]


def _default_stores() -> dict[str, str]:
    parser = build_parser()
    return {
        "run": parser.parse_args(["run"]).store,
        "serve": parser.parse_args(["serve"]).store,
        "replay --store": parser.parse_args(["replay", "e.jsonl", "--store"]).store,
        "demo": parser.parse_args(["demo"]).store,
    }


def test_run_serve_replay_and_demo_share_one_default_store(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STORE_ENV, raising=False)
    assert set(_default_stores().values()) == {DEFAULT_STORE} == {"sqlite:///var/isrwatch.db"}
    assert build_parser().parse_args(["replay", "e.jsonl"]).store is None  # no --store: no store written
    monkeypatch.setenv(STORE_ENV, "postgresql://isrwatch@db/isrwatch")
    assert set(_default_stores().values()) == {"postgresql://isrwatch@db/isrwatch"}


def test_replay_store_alone_fills_the_store_serve_reads_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a fresh directory (no var/ yet): `replay --store`, then `serve` with no --store answers what it wrote."""
    monkeypatch.delenv(STORE_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert replay_scenario("01-stuck-follower-shrink", "--store") == 0
    with open_store(DEFAULT_STORE) as store:
        assert store.last_batch_id() == 0
    with _serve([], cwd=tmp_path) as (base, said):
        assert "holds no batch" not in said
        partitions = httpx.get(f"{base}/v1/partitions", timeout=10).json()["partitions"]
        assert [(p["topic"], p["partition"]) for p in partitions] == [("orders", 0)]


def test_serve_over_a_store_nothing_wrote_says_so_on_stderr_and_in_readyz(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'typo.db'}"
    with _serve(["--store", store], cwd=tmp_path) as (base, said):
        assert f"warning: store {store} holds no batch: no `isrwatch run` or `isrwatch replay --store`" in said
        r = httpx.get(f"{base}/readyz", timeout=10)
        assert r.status_code == 503 and r.json() == {"error": "not_ready", "detail": NO_BATCH}


def test_demo_refuses_a_store_that_something_else_wrote_and_empties_an_earlier_demos(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workdir = tmp_path / "demo"
    replayed = f"sqlite:///{tmp_path / 'replayed.db'}"
    assert replay_scenario("01-stuck-follower-shrink", "--store", replayed) == 0
    assert main(["demo", "--dir", str(workdir), "--store", replayed]) == 2
    err = capsys.readouterr().err
    assert f"--store {replayed}: holds batches up to 0 of a replay, not of an earlier demo" in err
    with open_store(replayed) as store:
        assert store.last_batch_id() == 0  # untouched
    # A store an earlier demo's job wrote (its checkpoint is this demo's) is emptied for the new story.
    earlier = f"sqlite:///{tmp_path / 'earlier.db'}"
    with open_store(earlier) as store:
        store.write_batch(0, watermark_ms=1)
        store.claim({"job": "isrwatch-checkpoint-1", "checkpoint": str((workdir / "checkpoint").resolve())})
    demo._fresh(workdir, earlier)
    with open_store(earlier) as store:
        assert store.last_batch_id() is None and store.holder() is None


def test_version() -> None:
    done = subprocess.run([*CLI, "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == f"isrwatch {version('isrwatch')}\n"


@pytest.mark.parametrize(
    "argv,prog,says",
    [
        (
            ["bench", "nope"],
            "isrwatch bench",
            "unknown benchmark 'nope' (choose from engine, stream, api, agent, latency)",
        ),
        (["bench", "engine", "--nope"], "isrwatch bench engine", "unrecognized arguments: --nope"),
        (["replay"], "isrwatch replay", "the following arguments are required: EVENTS.jsonl"),
        (["run", "--nope"], "isrwatch run", "unrecognized arguments: --nope"),
        (["serve", "--port", "x"], "isrwatch serve", "argument --port: invalid int value: 'x'"),
        (["simulate", "--nope"], "isrwatch simulate", "unrecognized arguments: --nope"),
        (["demo", "--speed", "x"], "isrwatch demo", "argument --speed: invalid float value: 'x'"),
        (["lab", "nope"], "isrwatch lab", "invalid choice: 'nope'"),
        (["lab", "fault", "nope"], "isrwatch lab fault", "invalid choice: 'nope'"),
    ],
)
def test_a_usage_error_names_its_subcommand(argv: list[str], prog: str, says: str) -> None:
    done = subprocess.run([*CLI, *argv], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert re.search(rf"^{re.escape(prog)}: error: .*{re.escape(says)}", done.stderr, re.M), done.stderr
    assert done.stderr.startswith(f"usage: {prog} ")


def _serve(argv: list[str], cwd: Path) -> AbstractContextManager[tuple[str, str]]:
    """`isrwatch serve ARGV` in `cwd` on a port the kernel picks: (its base URL, what it said until it listened)."""
    return serving_command([*CLI, "serve", "--port", "0", *argv], cwd=cwd)
