"""The processes room on real Linux processes (`sh`, `sleep`, Python): /proc's state and start time, a process tree,
a reused pid never taken for the process that had it, children that stop with their descendants, detached
processes found again by pid and start time."""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from isrwatch.processes.child import Child
from isrwatch.processes.detached import Process, alive, launch, paused, send, tail, wait_gone
from isrwatch.processes.proc import cpu_seconds, descendants, running, start_time, state


def _until(check: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_a_childs_tree_is_found_and_stopped_with_it(tmp_path: Path) -> None:
    # A shell that starts a sleep in its own process group (as PySpark's worker daemon does) and waits.
    child = Child("tree", ["sh", "-c", "setsid sleep 60 & echo started; wait"], tmp_path / "tree.log")
    try:
        assert _until(lambda: len(descendants(child.proc.pid)) == 1)
        [(sleeper, started)] = descendants(child.proc.pid).items()
        assert running(sleeper, started) and not running(sleeper, started + 1)  # another start: another process
        assert state(sleeper) in ("S", "R")
    finally:
        child.stop()
    # The sleep left the shell's group: stop() sends it SIGKILL once it has not followed the shell out.
    assert not child.alive() and _until(lambda: not running(sleeper, started))
    assert child.tail() == "started"


def test_a_detached_process_is_paused_signalled_and_gone(tmp_path: Path) -> None:
    proc = Process(
        log=str(tmp_path / "logs" / "sleep.log"),
        argv=[sys.executable, "-c", "print('up', flush=True); import time; time.sleep(60)"],
    )
    launch(proc)
    try:
        assert alive(proc) and proc.start == start_time(proc.pid)
        assert send(proc, signal.SIGSTOP) and _until(lambda: paused(proc))
        assert state(proc.pid) == "T"
        name, cpu = cpu_seconds(proc.pid)
        assert "(python" in name and cpu >= 0
        assert not alive(Process(pid=proc.pid, start=proc.start + 1))  # the pid, reused by another process
        assert send(proc, signal.SIGCONT) and _until(lambda: not paused(proc))
        assert _until(lambda: tail(proc.log) == "    up")
        assert send(proc, signal.SIGTERM)
        assert wait_gone([proc], 10) == []  # reaped: a zombie counts as gone
    finally:
        send(proc, signal.SIGKILL)
    assert not send(proc, signal.SIGTERM) and state(proc.pid) is None
    assert tail(tmp_path / "none.log") == f"    ({tmp_path / 'none.log'}: no such file)"
