"""Loopback helpers shared by the tests that start real servers."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serving_command(argv: Sequence[str], **popen: Any) -> Iterator[tuple[str, str]]:
    """Run `argv` (an `isrwatch serve ... --port 0` command line) with `popen`'s cwd/env until uvicorn listens;
    yields (its base URL, what it said until then), and stops it on exit."""
    proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)
    try:
        said = []
        for line in proc.stdout:
            said.append(line)
            found = re.search(r"Uvicorn running on (http://127\.0\.0\.1:\d+)", line)
            if found:
                break
        else:
            raise AssertionError("isrwatch serve did not start:\n" + "".join(said))
        yield found.group(1), "".join(said)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        proc.stdout.close()


ROOT = Path(__file__).resolve().parents[2]


PLAYWRIGHT_CORE = ROOT / ".tools" / "node" / "node_modules" / "playwright-core"


@contextmanager
def serving(
    store_url: str, *options: str, isrwatch: Sequence[str] = (sys.executable, "-m", "isrwatch.cli"), **popen: Any
) -> Iterator[str]:
    """`isrwatch serve` (the command `isrwatch`, run with `popen`'s cwd and env) on a loopback port the kernel
    picks; yields its base URL."""
    with serving_command([*isrwatch, "serve", "--store", store_url, "--port", "0", *options], **popen) as (url, _):
        yield url
