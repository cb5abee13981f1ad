"""`isrwatch run --master spark://…` on a real standalone cluster (a master and two workers from the pyspark
package, tests/support/standalone.py) whose nodes' Python has the dependencies but not isrwatch: the job ships
the package by `spark.submit.pyFiles` (a zip from `isrwatch package --zip`) or as a packed virtualenv through
`spark.archives` (`isrwatch package --venv`), survives the SIGKILL of an executor, and its store equals the replay.
A node that cannot run the state function is named before the query starts.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from isrwatch.bench.stream import executor_pids
from isrwatch.cli.package import pack_venv
from isrwatch.store import open_store
from isrwatch.streaming.job import describe_failure
from tests.support.jobs import CONFIG, assert_store_is_the_replay, dump, replay_of, run_command
from tests.support.standalone import Standalone, node_python, standalone
from tests.support.streams import Mix, events, write_files

pytestmark = pytest.mark.spark

MIX = Mix(partitions=40, events=4000, seed=29)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    with standalone(tmp_path_factory.mktemp("spark")) as running:
        yield running


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The nodes' Python: msgspec, pyarrow, pandas, numpy; no isrwatch."""
    return node_python(tmp_path_factory.mktemp("node") / "venv")


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`isrwatch package --zip`: the package for --py-files."""
    out = tmp_path_factory.mktemp("ship") / "isrwatch.zip"
    done = subprocess.run([sys.executable, "-m", "isrwatch.cli", "package", "--zip", str(out)], capture_output=True)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return write_files(events(MIX), tmp_path_factory.mktemp("events"), 4)


def cluster_run(
    cluster: Standalone, inbox: Path, url: str, checkpoint: Path, log: Path, *conf: str
) -> subprocess.Popen[bytes]:
    """`isrwatch run --master spark://… --available-now`, one file per batch, with `conf` as --spark-conf."""
    argv = run_command(
        inbox, url, checkpoint, "--master", cluster.url, "--available-now", "--max-per-batch", "1",
        "--driver-memory", "1g", "--shuffle-partitions", "2", "--buckets", "4",
        "--set", f"replica_lag_time_max_ms={CONFIG.replica_lag_time_max_ms}",
        "--set", f"allowed_lateness_ms={CONFIG.allowed_lateness_ms}",
        "--spark-conf", "spark.executor.memory=768m",
        *(arg for pair in conf for arg in ("--spark-conf", pair)),
    )  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "SPARK_HOME")}
    with open(log, "ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)


def finish(proc: subprocess.Popen[bytes], log: Path, timeout: float = 400) -> str:
    try:
        code = proc.wait(timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert code == 0, text
    return text


def test_py_files_zip_survives_a_killed_executor_and_equals_the_replay(cluster, node, shipped, recording, tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    log = tmp_path / "run.log"
    conf = (f"spark.pyspark.python={node}", f"spark.submit.pyFiles={shipped}")
    launched = cluster.launched()
    proc = cluster_run(cluster, recording[0].parent, url, tmp_path / "checkpoint", log, *conf)
    try:
        deadline = time.monotonic() + 300
        with open_store(url) as store:
            while (store.last_batch_id() or -1) < 0:
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
        before = cluster.executors()
        assert len(before) == 2, before
        # `isrwatch bench stream --master spark://…` finds the same executors by the application's id.
        [app] = [a["id"] for a in cluster.state()["activeapps"]]
        assert sorted(executor_pids(app)) == before
        os.kill(before[0], signal.SIGKILL)
    finally:
        text = finish(proc, log)
    assert "executors ready: " in text and str(node) in text
    with open_store(url) as store:
        assert store.last_batch_id() == len(recording) - 1
    # Two executors, and the one the worker started in place of the killed one.
    assert len(cluster.launched() - launched) == 3
    assert_store_is_the_replay(dump(url), replay_of(url, recording))


def test_a_packed_venv_through_spark_archives_runs_the_job(cluster, node, recording, tmp_path):
    """The nodes' venv packed with isrwatch in it (what `isrwatch package --venv` does to the venv it runs in); the
    executors unpack it as ./environment and run its Python."""
    packed = tmp_path / "environment.tar.gz"
    pack_venv(node.parent.parent, packed)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    log = tmp_path / "run.log"
    inbox = tmp_path / "in"
    inbox.mkdir()
    for path in recording[:1]:
        (inbox / path.name).write_bytes(path.read_bytes())
    conf = (f"spark.archives={packed}#environment", "spark.pyspark.python=./environment/bin/python")
    text = finish(cluster_run(cluster, inbox, url, tmp_path / "checkpoint", log, *conf), log)
    assert "executors ready: " in text and "environment/bin/python" in text
    assert_store_is_the_replay(dump(url), replay_of(url, sorted(inbox.iterdir())))


def test_a_node_without_the_python_is_named_before_the_query_starts(cluster, recording, tmp_path):
    log = tmp_path / "run.log"
    missing = tmp_path / "nowhere" / "python"
    proc = cluster_run(
        cluster, recording[0].parent, f"sqlite:///{tmp_path / 'store.db'}", tmp_path / "checkpoint", log,
        f"spark.pyspark.python={missing}", "spark.task.maxFailures=1",
    )  # fmt: skip
    assert proc.wait(180) == 2
    errors = [line for line in log.read_text().splitlines() if line.startswith("isrwatch: error:")]
    assert len(errors) == 1, log.read_text()
    assert errors[0].startswith("isrwatch: error: executor ") and " on 127.0.0.1 cannot start Python " in errors[0]
    assert f"{missing}: No such file or directory; set --spark-conf spark.pyspark.python=" in errors[0]


def test_a_query_that_loses_the_python_of_an_executor_is_described_by_its_node():
    """An executor started after the preflight (a replacement on a node without the Python) fails the query; the
    summary names the node and the path, not the last line of the Java trace."""
    message = (
        "[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: Job aborted due to stage failure: "
        "Task 0 in stage 3.0 failed 4 times, most recent failure: Lost task 0.3 in stage 3.0 (TID 9) "
        '(10.0.0.7 executor 3): java.io.IOException: Cannot run program "/opt/venv/bin/python": error=2, '
        "No such file or directory\n\tat java.base/java.lang.ProcessBuilder.start(ProcessBuilder.java:1143)\n"
        "\t... 35 more\n=== Streaming Query ===\n"
    )
    assert describe_failure(Exception(message)) == (
        "executor 3 on 10.0.0.7 cannot start Python /opt/venv/bin/python: No such file or directory; "
        "set --spark-conf spark.pyspark.python=… or ship a venv with spark.archives"
    )
