"""A private, throwaway PostgreSQL server for tests (store, streaming sink): `with postgres_server() as url:`.

Debian's binaries under /usr/lib/postgresql/*/bin; the cluster lives in a temp dir, listens on a
free loopback port and a socket in that dir, with durability off (tests need speed, not crash
safety). PostgreSQL refuses to run as root, so as root it runs as the `postgres` system user. If it
cannot start, this raises: a store test must fail, never skip, without its database.
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.net import free_port

_databases = itertools.count(1)


class PostgresUnavailable(RuntimeError):
    """The private server could not be started; the message says what to install or fix."""


def _bin_dir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if not found:
        raise PostgresUnavailable(
            "no /usr/lib/postgresql/*/bin/initdb: run `bash scripts/provision.sh` "
            "(installs the Debian package postgresql)"
        )
    return Path(found[-1]).parent


def _as_server_user(cmd: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return cmd
    if shutil.which("runuser") is None:
        raise PostgresUnavailable("running as root without `runuser` to drop to the postgres user")
    return ["runuser", "-u", "postgres", "--", *cmd]


def _run(cmd: list[str], what: str) -> None:
    proc = subprocess.run(_as_server_user(cmd), capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise PostgresUnavailable(f"{what} failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")


@contextmanager
def postgres_server() -> Iterator[str]:
    """Start a server, yield the URL of its `postgres` database (user postgres, trust auth), stop and delete it."""
    bin_dir = _bin_dir()
    root = Path(tempfile.mkdtemp(prefix="isrwatch-pg-"))
    data = root / "data"
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    port = free_port()
    started = False
    try:
        _run(
            [
                str(bin_dir / "initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-instructions",
                "--no-sync",
            ],
            "initdb",
        )
        options = (
            f"-h 127.0.0.1 -p {port} -k {root} -c fsync=off -c synchronous_commit=off "
            "-c full_page_writes=off -c max_connections=200"
        )
        _run(
            [
                str(bin_dir / "pg_ctl"),
                "-D",
                str(data),
                "-l",
                str(root / "log"),
                "-o",
                options,
                "-w",
                "-t",
                "60",
                "start",
            ],
            "pg_ctl start",
        )
        started = True
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        if started:
            subprocess.run(
                _as_server_user([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]),
                capture_output=True,
                timeout=60,
            )
        shutil.rmtree(root, ignore_errors=True)


def fresh_database(server_url: str) -> str:
    """A new empty database on the server (one per test keeps tests independent); returns its URL."""
    import psycopg

    name = f"isrwatch_test_{os.getpid()}_{next(_databases)}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return server_url.rsplit("/", 1)[0] + "/" + name
