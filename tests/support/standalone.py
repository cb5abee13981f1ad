"""A real Spark standalone cluster for the tests, started from the pyspark package's own jars (its wheel has no
sbin/start-master.sh, but `bin/spark-class` runs the daemons): one master and N workers on loopback, and a Python
for the nodes that has only what the executors need, not isrwatch (so the job must ship it).

`spark-class` execs java: each pid is the daemon's JVM. Executors are the workers' children
(`CoarseGrainedExecutorBackend`), their Python workers under them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pyspark
from packaging.requirements import Requirement

from isrwatch.processes.proc import descendants
from tests.support.net import free_port

SPARK_HOME = Path(pyspark.__file__).parent
EXECUTOR_MAIN = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
# What the executors' Python needs besides isrwatch (streaming/preflight.py NEEDED) and what those need in turn.
EXECUTOR_DEPENDENCIES = ("msgspec", "pyarrow", "pandas", "numpy", "psycopg", "psycopg-binary")


@dataclass
class Standalone:
    url: str  # spark://127.0.0.1:PORT
    ui: str  # the master's web UI: /json/ lists workers and applications
    work: Path  # logs, and each worker's work directory
    master: subprocess.Popen
    workers: list[subprocess.Popen]

    def state(self) -> dict:
        with urllib.request.urlopen(f"{self.ui}/json/", timeout=5) as answer:
            return json.load(answer)

    def launched(self) -> set[str]:
        """Every executor the workers have launched, as APP/ID (their work directories: a worker makes one for each
        executor it starts, a replacement too)."""
        return {f"{d.parent.name}/{d.name}" for d in self.work.glob("worker*/app-*/*") if d.is_dir()}

    def executors(self) -> list[int]:
        """The executor JVMs running now (children of the workers)."""
        found = []
        for worker in self.workers:
            for pid in descendants(worker.pid):
                try:
                    if EXECUTOR_MAIN.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                        found.append(pid)
                except OSError:
                    continue
        return sorted(found)


def _environment() -> dict[str, str]:
    """The daemons' environment: Spark from the pyspark package, loopback only, nothing of the test's Python."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYSPARK_PYTHON")}
    return env | {"SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1"}


def _daemon(work: Path, name: str, *argv: str) -> subprocess.Popen:
    with open(work / f"{name}.log", "ab") as log:
        return subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), *argv],
            cwd=work,
            env=_environment(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the daemon and its executors (SIGKILL what is left after 20 s)."""
    family = [proc.pid, *descendants(proc.pid)]
    for pid in family:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for pid in family[1:]:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@contextmanager
def standalone(work: Path, workers: int = 2, cores: int = 1, memory: str = "1g") -> Iterator[Standalone]:
    """A master and `workers` workers (`cores` cores, `memory` each) on free loopback ports, stopped on exit."""
    work.mkdir(parents=True, exist_ok=True)
    port, ui_port = free_port(), free_port()
    master = _daemon(
        work, "master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
        "--webui-port", str(ui_port),
    )  # fmt: skip
    cluster = Standalone(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui_port}", work, master, [])
    try:
        for i in range(workers):
            argv = (
                "org.apache.spark.deploy.worker.Worker", cluster.url, "--host", "127.0.0.1", "--cores", str(cores),
                "--memory", memory, "--webui-port", str(free_port()), "--work-dir", str(work / f"worker{i}"),
            )  # fmt: skip
            cluster.workers.append(_daemon(work, f"worker{i}", *argv))
        deadline = time.monotonic() + 300  # spark-class runs a launcher JVM, then the daemon: slow under load
        while True:
            try:
                alive = [w for w in cluster.state()["workers"] if w["state"] == "ALIVE"]
            except OSError:
                alive = []
            if len(alive) == workers:
                break
            logs = "\n".join(p.read_text()[-2000:] for p in sorted(work.glob("*.log")))
            assert time.monotonic() < deadline and master.poll() is None, logs
            time.sleep(0.5)
        yield cluster
    finally:
        for proc in [*cluster.workers, master]:
            _stop(proc)


def _requirements(name: str, seen: set[str]) -> None:
    """`name` and the distributions it needs (no extras), by their canonical names, into `seen`."""
    key = name.lower().replace("_", "-")
    if key in seen:
        return
    seen.add(key)
    for line in metadata.requires(key) or ():
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            _requirements(req.name, seen)


def node_python(venv: Path) -> Path:
    """A virtualenv with the executors' dependencies and nothing else (no isrwatch, no pyspark): their installed
    files linked from this Python's site-packages (what `pip install` of the same wheels would lay out). Its
    python executable."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    (site,) = venv.glob("lib/python3*/site-packages")
    names: set[str] = set()
    for name in EXECUTOR_DEPENDENCIES:
        _requirements(name, names)
    for name in sorted(names):
        dist = metadata.distribution(name)
        for file in dist.files or ():
            source = Path(dist.locate_file(file)).resolve()
            target = site / file
            if not source.is_file() or not target.resolve().is_relative_to(site.resolve()):
                continue  # scripts in bin/ and the like
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(source, target)
            except OSError:
                shutil.copy2(source, target)
    return venv / "bin" / "python"
