"""`isrwatch demo --real` end to end: its own small lab (three real Kafka 3.9 brokers with isrwatch-agent, a monitor
broker, 20 records/s), the real streaming job reading the agents' events topic in local Spark, the real API. The
story's first fault, a real stall of broker 2, must show on the terminal as ZooKeeper's ISR shrink and as isrwatch's
stuck shrink, and the API must serve both isrwatch's decision and the broker's own ISR write; Ctrl-C must stop every
process the demo started, the lab's too. The demo is stopped once isrwatch showed the stall (its first micro-batch
dominates).

With --lab-dir the demo attaches to the session lab instead and leaves it running; that is shown by a Ctrl-C as
soon as its job and API run. The story itself runs on the demo's own lab: on the session lab (200 records/s, a
topic minutes long) the job's first micro-batch takes far longer, and every second of it is streamed again by the
reality suite (measured: 96 s there against 82 s with its own lab's start, on the loaded 2-core machine)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

from isrwatch.cli import main
from isrwatch.lab import faults
from isrwatch.lab.cluster import Lab, alive, load
from tests.cli.test_demo import DEMO_PROCESSES, interrupt, running_demo, stopped_cleanly
from tests.lab.session import current, fault_begins, fault_over, project_agent, states, wait_healthy
from tests.net import free_port

ZOOKEEPER_ISR = re.compile(r"KAFKA .* ISR \[([\d,]*)\] -> \[([\d,]*)\]")
LAB_DOWN = "lab: logs and data stay in"  # the last line of `isrwatch lab down`'s code


def get(port: int, path: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return json.load(r)


def test_demo_real_tells_a_real_stall_as_a_stuck_shrink_and_stops_everything(tmp_path: Path):
    project_agent()  # built with Maven if missing, as for the session lab
    port = free_port()
    workdir = tmp_path / "demo"
    out: list[str] = []
    seen = {"zookeeper shrink": False, "isrwatch shrink": False}
    try:
        with running_demo(port, workdir, "--real", "--kafka", "3.9", "--lag-ms", "5000", "--duration", "240") as proc:
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
            lab = load(workdir / "lab")
            # The lab runs (a broker may be down for the story's restart by now): its processes must end with it.
            assert any(alive(b) for b in lab.brokers) and alive(lab.zookeeper_process)
            started, rest = interrupt(proc, port, timeout=120)
    finally:
        if (workdir / "lab" / "lab.json").exists():  # whatever happened, no lab is left behind
            subprocess.run([sys.executable, "-m", "isrwatch.cli", "lab", "down", "--dir", str(workdir / "lab")])
    output = "".join(out) + rest
    stopped_cleanly(proc, port, output, started)
    assert "stopping: the story, streaming job, API, lab..." in output and LAB_DOWN in output, output
    assert not [p.pid for p in load(workdir / "lab").processes() if alive(p)], output


def test_demo_real_on_a_running_lab_stops_what_it_started_and_leaves_the_lab_running(lab: Lab, tmp_path: Path):
    wait_healthy(lab)
    port = free_port()
    window = fault_begins("stall")  # the story's first fault, should it begin before Ctrl-C
    out: list[str] = []
    with running_demo(port, tmp_path / "demo", "--real", "--lab-dir", lab.dir, "--duration", "120") as proc:
        for line in proc.stdout:  # --duration ends the demo (and this loop) if it never gets there
            out.append(line)
            if "the story begins" in line:
                break
        assert f"the lab in {Path(lab.dir).resolve()}" in "".join(out), "".join(out)
        started, rest = interrupt(proc, port, timeout=120)
    assert len(started) >= DEMO_PROCESSES  # (and the story's fault helpers)
    # The story's fault helpers belong to the lab (lab.json): they finish their fault, and the lab runs on.
    fault_over(lab, "stall")
    fault_over(lab, "restart")
    now = current(lab)
    output = "".join(out) + rest
    stopped_cleanly(proc, port, output, started, spared=frozenset(p.pid for p in now.processes()))
    assert "(still running)" in output and LAB_DOWN not in output, output
    assert alive(now.zookeeper_process) and alive(now.monitor) and alive(now.producer), output
    wait_healthy(now, timeout=180)
    window.over()
    if any(s.leader != s.preferred_leader for s in states(now).values()):  # the story got to its restart
        window = fault_begins("elect")
        faults.elect(Path(lab.dir))
        window.over()


def test_demo_real_refuses_a_lab_dir_without_a_running_lab_and_a_lag_other_than_the_labs(
    lab: Lab, tmp_path: Path, capsys
):
    assert main(["demo", "--real", "--lab-dir", str(tmp_path), "--dir", str(tmp_path / "demo")]) == 2
    assert f"--lab-dir {tmp_path}: no lab there" in capsys.readouterr().err
    assert main(["demo", "--real", "--lab-dir", lab.dir, "--lag-ms", "6000", "--dir", str(tmp_path / "demo")]) == 2
    assert "runs with replica.lag.time.max.ms 5000; leave --lag-ms out with --lab-dir" in capsys.readouterr().err
    assert main(["demo", "--lab-dir", lab.dir]) == 2
    assert "--lab-dir: only with --real" in capsys.readouterr().err
