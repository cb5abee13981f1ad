"""`isrwatch demo --real` end to end: its own small lab (three real Kafka 3.9 brokers with isrwatch-agent, a monitor
broker), the real streaming job reading the agents' events topic in local Spark, the real API. The story's first
fault, a real stall of broker 2, must show on the terminal as ZooKeeper's ISR shrink and as isrwatch's stuck
shrink, and the API must serve both isrwatch's decision and the broker's own ISR write; Ctrl-C must stop every
process the demo started, the lab's too. The demo is stopped once isrwatch showed the stall (its first micro-batch
dominates: 170 s in all on the loaded 2-core machine), and the session lab is never touched."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from streaming.lab.cluster import alive, load
from streaming.sim.processes import descendants, running
from tests.lab import project_agent
from tests.net import free_port
from tests.streaming.cli.test_demo import start_demo

ZOOKEEPER_ISR = re.compile(r"KAFKA .* ISR \[([\d,]*)\] -> \[([\d,]*)\]")


def get(port: int, path: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return json.load(r)


def test_demo_real_tells_a_real_stall_as_a_stuck_shrink_and_stops_everything(tmp_path):
    project_agent()  # built with Maven if missing, as for the session lab
    port = free_port()
    workdir = tmp_path / "demo"
    proc = start_demo(port, workdir, "--real", "--lag-ms", "5000", "--duration", "240")
    out: list[str] = []
    seen = {"zookeeper shrink": False, "isrwatch shrink": False}
    started: dict[int, int] = {}
    try:
        for line in proc.stdout:  # --duration ends the demo (and this loop) if the story never shows
            out.append(line)
            isr = ZOOKEEPER_ISR.search(line)
            if isr and "2" in isr[1].split(",") and "2" not in isr[2].split(","):
                seen["zookeeper shrink"] = True
            if "SHRINK" in line and "replica 2 stuck" in line:
                seen["isrwatch shrink"] = True
                break
        assert all(seen.values()), "".join(out)
        shrinks = get(port, "/v1/decisions?kind=shrink")["decisions"]
        assert any(d["reasons"] == {"2": "stuck"} and 2 not in d["isr_after"] for d in shrinks), shrinks
        written = get(port, "/v1/observed?type=isr_updated")["observed"]  # the leaders' own ZooKeeper writes
        assert any(o["kind"] == "shrink" and 2 not in o["isr"] and 2 in o["isr_before"] for o in written), written
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as page:
            assert b"<title>isrwatch</title>" in page.read()
        started = descendants(proc.pid)
        lab = load(workdir / "lab")
        # The lab runs (a broker may be down for the story's restart by now): its processes must end with it.
        assert any(alive(b) for b in lab.brokers) and alive(lab.zookeeper_process)
        proc.send_signal(signal.SIGINT)
        rest = proc.communicate(timeout=120)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if (workdir / "lab" / "lab.json").exists():  # whatever happened, no lab is left behind
            subprocess.run([sys.executable, "-m", "streaming.cli", "lab", "down", "--dir", str(workdir / "lab")])
    output = "".join(out) + rest
    assert proc.returncode == 0, output
    assert f"http://127.0.0.1:{port}/" in output and "stopped." in output
    left = {pid: Path(f"/proc/{pid}/cmdline").read_bytes() for pid, at in started.items() if running(pid, at)}
    assert not left, output
    assert not [p.pid for p in load(workdir / "lab").processes() if alive(p)], output
