"""Outages: the store goes away mid-stream and comes back; a replay must not take a running job's store."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx

from isrwatch.cli import main
from tests.support.jobs import CONFIG, dump, run_command, run_job
from tests.support.net import free_port
from tests.support.pg import PrivatePostgres, fresh_database
from tests.support.streams import Mix, events, in_order, write_files

SETTINGS = [
    f"--set=replica_lag_time_max_ms={CONFIG.replica_lag_time_max_ms}",
    f"--set=allowed_lateness_ms={CONFIG.allowed_lateness_ms}",
]


def _wait(predicate, what: str, timeout: float, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}" + (f":\n{log.read_text()}" if log else "")
        time.sleep(0.3)


def _committed(url: str) -> int:
    from isrwatch.store import open_store

    try:
        with open_store(url) as store:
            return store.last_batch_id() or -1
    except Exception:  # noqa: BLE001 - the server may be down right now
        return -2


def test_postgres_down_mid_stream_past_the_jobs_idle_time_the_store_ends_as_before(spark, tmp_path: Path) -> None:
    files = write_files(events(Mix(partitions=40, events=6000, seed=5)), tmp_path / "files", 6)
    uninterrupted = f"sqlite:///{tmp_path / 'uninterrupted.db'}"
    staged = tmp_path / "staged"
    staged.mkdir()
    for path in files:
        shutil.copy2(path, staged / path.name)
    in_order(sorted(staged.iterdir()))
    run_job(staged, uninterrupted, tmp_path / "checkpoint-uninterrupted")

    server = PrivatePostgres()
    server.start()
    try:
        url = fresh_database(server.url)
        inbox = tmp_path / "in"
        inbox.mkdir()
        log = tmp_path / "job.log"
        port = free_port()
        with open(log, "wb") as out:
            job = subprocess.Popen(
                run_command(
                    inbox,
                    url,
                    tmp_path / "checkpoint",
                    "--trigger",
                    "0.5",
                    "--max-per-batch",
                    "1",
                    "--until-idle",
                    "8",  # every wait here has a batch running (the outage: its commit retrying), so idle is the end
                    "--store-retry",
                    "120",
                    *SETTINGS,
                ),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
            api = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "isrwatch.cli",
                    "serve",
                    "--store",
                    url,
                    "--port",
                    str(port),
                    "--ready-max-batch-age",
                    "0",
                    "--ready-max-watermark-lag",
                    "0",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        try:
            for path in files[:2]:
                shutil.copy2(path, inbox / path.name)
            _wait(lambda: _committed(url) >= 1, "the first batches", 240, log)
            server.stop("fast")  # the database goes away mid-stream (a clean shutdown: the tests run it without fsync)
            for path in files[2:4]:
                shutil.copy2(path, inbox / path.name)
            _wait(lambda: "the store did not answer" in log.read_text(), "the job to notice", 60, log)
            ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10)
            assert ready.status_code == 503 and ready.json()["error"] == "store_unavailable", ready.text
            # The commit's retries back off 0.5, 1, 2, 4, then 8 s: once it waits 8 s more, the outage outlasts the
            # job's --until-idle (8 s) whenever the store comes back, and the job must still be waiting for it.
            _wait(lambda: "retrying in 8 s" in log.read_text(), "the job's fifth try", 60, log)
            assert job.poll() is None, log.read_text()  # ... and the job waits for it
            server.start()  # ... and comes back
            for path in files[4:]:
                shutil.copy2(path, inbox / path.name)
            assert job.wait(300) == 0, log.read_text()
            assert httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10).status_code == 200
        finally:
            for proc in (job, api):
                if proc.poll() is None:
                    proc.terminate()
                    proc.wait(30)
        retries = re.findall(r"batch (\d+): the store did not answer", log.read_text())
        assert retries, log.read_text()
        assert dump(url) == dump(uninterrupted)
    finally:
        server.remove()


def test_replay_refuses_a_store_a_streaming_job_writes(spark, tmp_path: Path, capsys) -> None:
    files = write_files(events(Mix(partitions=10, events=800, seed=2)), tmp_path / "in", 1)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    run_job(tmp_path / "in", url, tmp_path / "checkpoint")
    before = dump(url)
    capsys.readouterr()
    assert main(["replay", str(files[0]), "--store", url]) == 2
    err = capsys.readouterr().err
    assert "is written by streaming job isrwatch-checkpoint" in err and str(tmp_path / "checkpoint") in err
    assert "pid" in err and "last batch" in err
    assert dump(url) == before  # nothing was written
    other = f"sqlite:///{tmp_path / 'other.db'}"
    assert main(["replay", str(files[0]), "--store", other]) == 0
