"""The demo run as a process: started, interrupted and checked to stop cleanly."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from isrwatch.processes.proc import descendants, running


@contextlib.contextmanager
def running_demo(port: int, workdir: Path, *options: str) -> Iterator[subprocess.Popen]:
    """`isrwatch demo` on `port` in `workdir` (its store there too), its terminal output on stdout; killed if still
    running at the end."""
    store = f"sqlite:///{workdir / 'isrwatch.db'}"
    argv = [sys.executable, "-m", "isrwatch.cli", "demo", "--port", str(port), "--dir", str(workdir), "--store", store]
    argv += options
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


DEMO_PROCESSES = 3  # the streaming job, its Spark JVM and the API, at the least


def interrupt(proc: subprocess.Popen, port: int, timeout: float) -> tuple[dict[int, int], str]:
    """Ctrl-C to the demo once its status page is served and it has started its DEMO_PROCESSES (the job's Spark JVM
    may come up a few seconds after the API; all must be known to check that none is left): the processes it had
    started, and the rest of its output once it stopped."""
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as page:
                assert b"<title>isrwatch</title>" in page.read()
            break
        except OSError:
            assert time.monotonic() < deadline, "the demo's status page did not answer within 60 s"
            time.sleep(0.5)
    while len(started := descendants(proc.pid)) < DEMO_PROCESSES and time.monotonic() < deadline:
        time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    return started, proc.communicate(timeout=timeout)[0]


def stopped_cleanly(
    proc: subprocess.Popen, port: int, output: str, started: dict[int, int], spared: frozenset[int] = frozenset()
) -> None:
    """Ctrl-C stopped the demo: exit 0, its URL and `stopped.` said, nothing it started (but `spared`) left running."""
    assert proc.returncode == 0, output
    assert f"http://127.0.0.1:{port}/" in output and "stopped." in output
    left = {
        pid: Path(f"/proc/{pid}/cmdline").read_bytes()
        for pid, at in started.items()
        if running(pid, at) and pid not in spared
    }
    assert not left, output
