"""`isrwatch demo --real` end to end, on its default: its own small lab (Kafka 4.4.0 in KRaft mode, three combined
nodes with isrwatch-agent, a monitor node, 20 records/s), the real streaming job reading the agents' events topic in
local Spark, the real API. The story must wait for isrwatch's first micro-batch, then tell every step as Kafka did
it: the stall of broker 2 as the leaders' ISR shrinks (KAFKA lines) and isrwatch's stuck shrink and expand of it,
the restart of broker 3 once its new incarnation registered (a new broker epoch) and is back in every ISR, the
preferred election; the audit must find no divergence but timing, and Ctrl-C must stop every process the demo
started, the lab's too.

With --lab-dir the demo attaches to the session lab (ZooKeeper mode) instead and leaves it running; that is shown by
a Ctrl-C as soon as its job and API run."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

from isrwatch.cli import main
from isrwatch.lab import faults
from isrwatch.lab.jars import KAFKA_NEWEST
from isrwatch.lab.record import KRAFT, Lab, load
from isrwatch.processes.detached import alive
from tests.support.demo import DEMO_PROCESSES, interrupt, running_demo, stopped_cleanly
from tests.support.lab import current, fault_begins, fault_over, project_agent, states, wait_healthy
from tests.support.net import free_port

KAFKA_ISR = re.compile(r"KAFKA .* ISR \[([\d,]*)\] -> \[([\d,]*)\]")
NEW_INCARNATION = re.compile(r"KAFKA   broker 3's new incarnation registered \(broker epoch (\d+) -> (\d+)\)")
LAB_DOWN = "lab: logs and data stay in"  # the last line of `isrwatch lab down`'s code
# The story's steps, in their order on the terminal.
STEPS = (
    "isrwatch is watching: first batch after",
    "FAULT   broker 2 stalls for 12 s",
    "KAFKA   broker 2 back in every ISR after",
    "FAULT   broker 3 killed (SIGKILL); it starts again at once",
    "KAFKA   broker 3's new incarnation registered",
    "FAULT   preferred leader election over every partition",
    "lab partitions moved to their preferred leader",
    "the story is over",
)
SHRINK = re.compile(r"\b(SHRINK|PROPOSE shrink)\b")
EXPAND = re.compile(r"\b(EXPAND|PROPOSE expand)\b")
NARRATED = re.compile(r"^\[(\d+):(\d+):(\d+(?:\.\d+)?)\]")


def get(port: int, path: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return json.load(r)


def _at(lines: list[str], text: str) -> int:
    """The index of the first line holding `text` (-1: none)."""
    return next((i for i, line in enumerate(lines) if text in line), -1)


def _seconds(line: str) -> float:
    """When the demo said the line, in seconds of its wall clock ([HH:MM:SS], the clock the page shows)."""
    m = NARRATED.match(line)
    assert m, line
    return int(m[1]) * 3600 + int(m[2]) * 60 + float(m[3])


def test_demo_real_on_its_default_tells_the_whole_story_and_stops_everything(tmp_path: Path):
    project_agent()  # built with Maven if missing, as for the session lab
    port = free_port()
    workdir = tmp_path / "demo"
    out: list[str] = []
    try:
        with running_demo(port, workdir, "--real", "--duration", "600") as proc:
            for line in proc.stdout:  # --duration ends the demo (and this loop) if the story never ends
                out.append(line)
                if "the story is over" in line or "the story stopped" in line:
                    break
            text = "".join(out)
            at = [_at(out, step) for step in STEPS]
            assert -1 not in at and at == sorted(at), text
            assert "not elected" not in out[at[6]], text
            old, new = map(int, NEW_INCARNATION.search(text).groups())
            assert new > old, text
            story = out[at[1] :]  # from the stall on: Kafka's shrinks of broker 2, then isrwatch's
            kafka = [line for line in story if (m := KAFKA_ISR.search(line)) and "2" in m[1] and "2" not in m[2]]
            # KRaft leaders propose (AlterPartition): isrwatch says PROPOSE shrink/expand, then COMMIT
            shrinks = [line for line in story if SHRINK.search(line) and "replica 2 stuck" in line]
            assert kafka and shrinks and any(EXPAND.search(line) and "replica 2 caught up" in line for line in story), (
                text
            )
            print(
                f"\n  demo --real: isrwatch watching at [{out[at[0]][1:9]}], the story over at "
                f"[{out[at[-1]][1:9]}]; the stall's first shrink: KAFKA at [{kafka[0][1:9]}], isrwatch "
                f"{_seconds(shrinks[0]) - _seconds(kafka[0]):.1f} s later"
            )
            # No divergence but timing: broker 2's last events before SIGSTOP reach the topic after SIGCONT and are
            # applied in their place (SPEC §6, `broker_stall_wait_ms`).
            divergences = get(port, "/v1/divergences?page_size=1000")["divergences"]
            assert [d for d in divergences if d["kind"] != "timing"] == [], divergences
            lab = load(workdir / "lab")
            assert (lab.mode, lab.kafka_version) == (KRAFT, KAFKA_NEWEST)
            assert all(alive(b) for b in lab.brokers) and alive(lab.monitor)
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
