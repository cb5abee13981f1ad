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

import pytest

from tests.support.net import free_port

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


class PrivatePostgres:
    """A private server that a test may stop and start again (an outage), its data kept in between."""

    def __init__(self) -> None:
        self.bin_dir = _bin_dir()
        self.root = Path(tempfile.mkdtemp(prefix="isrwatch-pg-"))
        self.data = self.root / "data"
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        self.port = free_port()
        self.running = False
        _run(
            [
                str(self.bin_dir / "initdb"),
                "-D",
                str(self.data),
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

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        options = (
            f"-h 127.0.0.1 -p {self.port} -k {self.root} -c fsync=off -c synchronous_commit=off "
            "-c full_page_writes=off -c max_connections=200"
        )
        pg_ctl = str(self.bin_dir / "pg_ctl")
        _run(
            [pg_ctl, "-D", str(self.data), "-l", str(self.root / "log"), "-o", options, "-w", "-t", "60", "start"],
            "pg_ctl start",
        )
        self.running = True

    def stop(self, mode: str = "immediate") -> None:
        subprocess.run(
            _as_server_user([str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop"]),
            capture_output=True,
            timeout=60,
        )
        self.running = False

    def remove(self) -> None:
        if self.running:
            self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@contextmanager
def postgres_server() -> Iterator[str]:
    """Start a server, yield the URL of its `postgres` database (user postgres, trust auth), stop and delete it."""
    server = PrivatePostgres()
    try:
        server.start()
        yield server.url
    finally:
        server.remove()


def fresh_database(server_url: str) -> str:
    """A new empty database on the server (one per test keeps tests independent); returns its URL."""
    import psycopg

    name = f"isrwatch_test_{os.getpid()}_{next(_databases)}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return server_url.rsplit("/", 1)[0] + "/" + name


def store_url(request: pytest.FixtureRequest, sqlite_file: Path) -> str:
    """The store a test parametrised over ("sqlite", "postgresql") writes to: a SQLite file, or a fresh database on
    the session's private PostgreSQL server (the `postgres_server_url` fixture)."""
    if request.param == "sqlite":
        return f"sqlite:///{sqlite_file}"
    return fresh_database(request.getfixturevalue("postgres_server_url"))
