"""Kill `isrwatch run` with SIGKILL mid-stream, restart it from its checkpoint: the store ends as if never killed.

The killed job keeps its state in RocksDB, the uninterrupted one in the default (HDFS-backed) store:
the provider changes where state lives, never what the job decides.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from isrwatch.processes.proc import descendants, running
from isrwatch.store import open_store
from tests.support.jobs import CONFIG, dump, run_command, run_job
from tests.support.streams import Mix, events, in_order, write_files


def job(inbox: Path, url: str, checkpoint: Path, log: Path, *extra: str) -> subprocess.Popen:
    argv = run_command(
        inbox,
        url,
        checkpoint,
        "--max-per-batch",
        "1",
        "--driver-memory",
        "1g",
        "--state-store",
        "rocksdb",
        "--set",
        f"replica_lag_time_max_ms={CONFIG.replica_lag_time_max_ms}",
        "--set",
        f"allowed_lateness_ms={CONFIG.allowed_lateness_ms}",
        *extra,
    )
    with open(log, "ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def test_sigkill_mid_stream_then_restart_ends_with_the_uninterrupted_store(spark, tmp_path):
    files = write_files(events(Mix(partitions=60, events=12_000, seed=21)), tmp_path / "files", 8)
    inbox = tmp_path / "in"
    inbox.mkdir()
    for path in files:
        (inbox / path.name).write_bytes(path.read_bytes())
    in_order(sorted(inbox.iterdir()))
    uninterrupted = f"sqlite:///{tmp_path / 'uninterrupted.db'}"
    run_job(inbox, uninterrupted, tmp_path / "checkpoint-uninterrupted")

    url = f"sqlite:///{tmp_path / 'killed.db'}"
    log = tmp_path / "job.log"
    proc = job(inbox, url, tmp_path / "checkpoint", log, "--trigger", "0.5")
    family: dict[int, int] = {}
    try:
        deadline = time.monotonic() + 180
        with open_store(url) as store:
            while (store.last_batch_id() or -1) < 2:
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                family.update(descendants(proc.pid))
                time.sleep(0.2)
        family.update(descendants(proc.pid))
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
        # The JVM and its Python workers follow their parent out; whatever we started and is left, goes.
        deadline = time.monotonic() + 20
        while (left := [p for p, started in family.items() if running(p, started)]) and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    with open_store(url) as store:
        killed_at = store.last_batch_id()
    assert killed_at is not None and killed_at < 8, "the job finished before it was killed"

    restarted = job(inbox, url, tmp_path / "checkpoint", log, "--available-now")
    assert restarted.wait(300) == 0, log.read_text()
    assert "batch" in log.read_text()
    assert dump(url) == dump(uninterrupted)
