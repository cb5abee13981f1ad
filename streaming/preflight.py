"""Before the query starts on a cluster: can every executor's Python run the state function?

Spark starts the executors' Python (`spark.pyspark.python`, else PYSPARK_PYTHON, which isrwatch sets to the driver's
own interpreter) only when the first task needs it, and a path missing on a node fails the query 20 s later with
the last line of a Java trace. The preflight runs a tiny job on the executors that imports what the state function
needs and says, in one line per node, which host lacks what.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from isrwatch.state.config import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# What an executor imports: the state function (msgspec, pyarrow, pandas, numpy) and the store writer, which writes
# its partition rows (psycopg: the sink module imports it, SQLite is in the standard library).
NEEDED = ("isrwatch", "msgspec", "pyarrow", "pandas", "numpy", "psycopg")
SHIP_HINT = (
    "ship the package with --spark-conf spark.submit.pyFiles=isrwatch.zip (isrwatch package --zip) "
    "or a venv with spark.archives (isrwatch package --venv)"
)
PYTHON_HINT = "set --spark-conf spark.pyspark.python=… or ship a venv with spark.archives"
# Spark's task failure: "Lost task 0.3 in stage 0.0 (TID 3) (HOST executor ID): java.io.IOException: Cannot run
# program "PATH": error=2, No such file or directory" (TaskSetManager, ProcessBuilder).
_LOST_TASK = re.compile(r"\((\S+) executor (\S+)\): java\.io\.IOException: Cannot run program \"([^\"]*)\"")
_REASON = re.compile(r"Cannot run program \"[^\"]*\"(?:[^,\n]*), ([^\n]+)")


class ExecutorPythonError(ConfigError):
    """An executor's Python cannot run the state function: the node, and what it lacks."""


def python_start_failure(text: str) -> str | None:
    """The one line for a Spark error in which an executor could not start its Python, else None."""
    lost = _LOST_TASK.search(text)
    if lost is None:
        return None
    host, executor, python = lost.groups()
    reason = _REASON.search(text, lost.start())
    why = reason.group(1).strip() if reason else "cannot run it"
    return f"executor {executor} on {host} cannot start Python {python}: {why}; {PYTHON_HINT}"


def _probe() -> object:
    """The function the executors run, pickled by value (a closure): it must not need isrwatch to be importable."""

    def probe(_: Iterable[int]) -> Iterator[tuple[str, str, str]]:
        import importlib
        import socket
        import sys

        missing = []
        for name in NEEDED:
            try:
                importlib.import_module(name)
            except Exception as exc:  # an ImportError, or a broken dependency of the module
                missing.append(f"{name} ({type(exc).__name__}: {exc})")
        yield socket.gethostname(), sys.executable, "; ".join(missing)

    return probe


def check_executors(spark: SparkSession) -> list[tuple[str, str]]:
    """Run the probe on the executors (a few tasks per core); (host, Python) of those that passed. Raises
    ExecutorPythonError naming each host whose Python is missing or lacks a module."""
    from py4j.protocol import Py4JJavaError

    sc = spark.sparkContext
    tasks = 2 * max(2, sc.defaultParallelism)
    try:
        found = set(sc.parallelize(range(tasks), tasks).mapPartitions(_probe()).collect())
    except Py4JJavaError as exc:
        line = python_start_failure(str(exc.java_exception)) or python_start_failure(str(exc))
        if line is None:
            raise
        raise ExecutorPythonError(line) from None
    lacking = sorted((host, python, missing) for host, python, missing in found if missing)
    if lacking:
        raise ExecutorPythonError(
            "; ".join(f"executor Python {python} on {host} lacks {missing}" for host, python, missing in lacking)
            + f"; {SHIP_HINT}"
        )
    return sorted((host, python) for host, python, _ in found)
