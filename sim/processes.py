"""Child processes that never outlive their parent, and the /proc reads that find what they left behind.

A Linux process supervisor for the demo (and the benchmarks): commands run in their own sessions (a
Ctrl-C reaches only the parent), get SIGTERM when the parent dies however it dies (prctl), and are
stopped with every descendant, a reused pid never mistaken for one of them.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import IO

STOP_GRACE_S = 20
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM when the demo dies, however it dies (Linux prctl)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat fields after the command name (state first), or None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def descendants(root: int) -> dict[int, int]:
    """Every process below `root`: pid -> start time (clock ticks), so a reused pid is never taken for one."""
    procs = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) is not None:
            procs[int(entry.name)] = (int(fields[1]), int(fields[19]))
    found: dict[int, int] = {}
    frontier = {root}
    while frontier:
        frontier = {pid for pid, (ppid, _) in procs.items() if ppid in frontier and pid not in found}
        found.update((pid, procs[pid][1]) for pid in frontier)
    return found


def running(pid: int, started: int) -> bool:
    """Whether that very process (same start time) still runs; an unreaped zombie does not."""
    fields = _stat(pid)
    return fields is not None and int(fields[19]) == started and fields[0] not in ("Z", "X")


class Child:
    """A command in its own session (Ctrl-C reaches only the demo), output to a log file."""

    def __init__(self, name: str, argv: list[str], log: Path) -> None:
        self.name = name
        self.log_path = log
        self.log: IO[bytes] = open(log, "wb")  # noqa: SIM115 - open for the child's whole life
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        """SIGTERM to the command, which stops its own helpers (the job its Spark JVM and Python workers);
        then SIGKILL to whatever of its process group is left, and to any helper that made a group of its
        own (PySpark's worker daemon) and has not followed the JVM out within a few seconds."""
        family = descendants(self.proc.pid)
        if self.alive():
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(STOP_GRACE_S)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.log.close()
        deadline = time.monotonic() + 5
        while (
            left := [pid for pid, started in family.items() if running(pid, started)]
        ) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def tail(self, lines: int = 15) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
