"""`isrwatch serve` as operators run it: a real uvicorn process on loopback, token from the environment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.net import free_port
from tests.support.replays import replay_scenario


def _listening_addresses(port: int) -> set[str]:
    """Local IPv4 addresses (hex, as in /proc/net/tcp) listening on `port`."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, hex_port = local.split(":")
        if int(hex_port, 16) == port and state == "0A":
            found.add(address)
    return found


@pytest.fixture
def server(store_url: str, tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen]]:
    assert replay_scenario("01-stuck-follower-shrink", "--store", store_url) == 0
    port = free_port()
    env = {**os.environ, "ISRWATCH_API_TOKEN": "from-env"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "isrwatch.cli",
            "serve",
            "--store",
            store_url,
            "--port",
            str(port),
            "--ready-max-watermark-lag",
            "0",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"isrwatch serve did not come up:\n{proc.communicate()[0]}")
        time.sleep(0.1)
    try:
        yield base, proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serve_over_loopback_with_a_token_from_the_environment(server: tuple[str, subprocess.Popen]) -> None:
    base, proc = server
    port = int(base.rsplit(":", 1)[1])
    assert _listening_addresses(port) == {"0100007F"}  # 127.0.0.1 only, by default
    auth = {"Authorization": "Bearer from-env"}
    with httpx.Client(base_url=base, timeout=10) as client:
        assert client.get("/v1/partitions/orders/0/isr").status_code == 401
        r = client.get("/v1/partitions/orders/0/isr", headers=auth)
        assert r.status_code == 200
        assert r.json() == {
            "cluster": "default",
            "topic": "orders",
            "partition": 0,
            "leader": 1,
            "leader_epoch": 0,
            "isr": [1, 2],
        }
        assert client.get("/readyz").json()["last_batch_id"] == 0
        metrics = client.get("/metrics", headers=auth)
        assert 'isrwatch_isr_shrinks_total{broker="1",cluster="default",reason="stuck"} 1.0' in metrics.text
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=15)
    # uvicorn shuts down gracefully, then re-raises the signal so supervisors see why it stopped.
    assert proc.returncode in (0, -signal.SIGTERM), output
    assert "Application shutdown complete" in output
    assert "bearer token required" in output
