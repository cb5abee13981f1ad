"""Child processes that never outlive their parent.

A Linux process supervisor for the demo (and the benchmarks): commands run in their own sessions (a
Ctrl-C reaches only the parent), get SIGTERM when the parent dies however it dies (prctl), and are
stopped with every descendant, a reused pid never mistaken for one of them (`proc`).
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

from .proc import descendants, running

STOP_GRACE_S = 20
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM when the demo dies, however it dies (Linux prctl)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


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
