"""The /proc reads: a process's state and start time, and every process below one, a reused pid never mistaken for
the process that had it before (its start time differs)."""

from __future__ import annotations

import os
from pathlib import Path


def _read_stat(pid: int) -> tuple[str, list[str]]:
    """/proc/PID/stat as the pid and command name (`123 (java`: a name may hold spaces and parentheses, so it ends
    at the last `)`) and the fields after it; OSError when the process is gone."""
    head, sep, rest = Path(f"/proc/{pid}/stat").read_text().rpartition(")")
    if not sep:
        raise OSError(f"/proc/{pid}/stat: no command name")
    return head, rest.split()


def stat(pid: int) -> list[str] | None:
    """/proc/PID/stat fields after the command name (state first), or None when it is gone."""
    try:
        return _read_stat(pid)[1]
    except OSError:
        return None


def state(pid: int) -> str | None:
    """The process's state letter (R, S, D, T: stopped, Z: a zombie, ...), None when it is gone."""
    fields = stat(pid)
    return None if fields is None else fields[0]


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, None if it is gone or a zombie."""
    fields = stat(pid)
    return None if fields is None or fields[0] in ("Z", "X") else int(fields[19])


def running(pid: int, started: int) -> bool:
    """Whether that very process (same start time) still runs; an unreaped zombie does not."""
    return start_time(pid) == started


def cpu_seconds(pid: int) -> tuple[str, float]:
    """A process's command name (as /proc shows it, `(java`) and the user + system CPU seconds it has used;
    OSError if the process is gone."""
    name, fields = _read_stat(pid)
    return name, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def descendants(root: int) -> dict[int, int]:
    """Every process below `root`: pid -> start time (clock ticks), so a reused pid is never taken for one."""
    procs = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := stat(int(entry.name))) is not None:
            procs[int(entry.name)] = (int(fields[1]), int(fields[19]))
    found: dict[int, int] = {}
    frontier = {root}
    while frontier:
        frontier = {pid for pid, (ppid, _) in procs.items() if ppid in frontier and pid not in found}
        found.update((pid, procs[pid][1]) for pid in frontier)
    return found
