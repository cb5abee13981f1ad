"""Processes that outlive the command that started them: recorded by pid and start time (the lab keeps them in
lab.json), so a later command, or a fault's detached helper, finds, signals and stops that very process and never
one that got its pid since."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from .proc import running, start_time, state


@dataclass
class Process:
    """A detached process; `start` (its start time since boot) guards against a recycled pid."""

    pid: int = 0
    start: int = 0
    log: str = ""  # where its stdout and stderr go
    argv: list[str] = field(default_factory=list)


def alive(proc: Process | None) -> bool:
    """Whether the process is still running (a zombie child is reaped and counts as gone)."""
    if proc is None or proc.pid <= 0:
        return False
    with contextlib.suppress(ChildProcessError):
        os.waitpid(proc.pid, os.WNOHANG)
    return running(proc.pid, proc.start)


def paused(proc: Process | None) -> bool:
    """Whether the process is stopped (SIGSTOP, e.g. by a stall): it answers nothing until SIGCONT."""
    return alive(proc) and state(proc.pid) in ("T", "t")


def send(proc: Process | None, sig: int) -> bool:
    """Signal the process if it is still the one started; False if it is gone."""
    if not alive(proc):
        return False
    try:
        os.kill(proc.pid, sig)
    except ProcessLookupError:
        return False
    return True


def launch(proc: Process) -> None:
    """Start the process detached (own session, no stdin), stdout and stderr appended to its log."""
    Path(proc.log).parent.mkdir(parents=True, exist_ok=True)
    with open(proc.log, "ab") as out:
        popen = subprocess.Popen(
            proc.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    proc.pid, proc.start = popen.pid, start_time(popen.pid) or 0


def wait_gone(procs: list[Process], timeout: float) -> list[Process]:
    """Wait until the processes have exited; returns those still running after `timeout`."""
    deadline = time.monotonic() + timeout
    while (left := [p for p in procs if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def tail_text(text: str, lines: int = 20) -> str:
    """The last lines of a text, indented for an error message."""
    return "\n".join(f"    {line}" for line in text.splitlines()[-lines:])


def tail(path: str | Path, lines: int = 20) -> str:
    """The last lines of a log (a process's output), indented for an error message."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return f"    ({path}: no such file)"
    return tail_text(text, lines) or f"    ({path} is empty)"
