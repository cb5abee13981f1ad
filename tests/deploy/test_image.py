"""deploy/Dockerfile, checked without a Docker engine: hadolint, and what the image promises statically."""

from __future__ import annotations

import re
import sys
import tomllib
import zipfile

import pyspark
import yaml

from tests.deploy.support import BIN, CHART, ROOT, run

DOCKERFILE = ROOT / "deploy" / "Dockerfile"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
VALUES = yaml.safe_load((CHART / "values.yaml").read_text())


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", "\n".join(line for line in DOCKERFILE.read_text().splitlines()
                                          if not line.lstrip().startswith("#")))
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in text.splitlines() if line.strip()]


def _arg_defaults() -> dict[str, str]:
    """Build arguments and their defaults (an ARG re-declared after FROM keeps the earlier default)."""
    defaults: dict[str, str] = {}
    for kind, arg in INSTRUCTIONS:
        if kind == "ARG":
            name, _, default = arg.partition("=")
            if default or name not in defaults:
                defaults[name] = default
    return defaults


INSTRUCTIONS = _instructions()
ARGS = _arg_defaults()
RUNS = [arg for kind, arg in INSTRUCTIONS if kind == "RUN"]


def test_hadolint_finds_nothing() -> None:
    run([BIN / "hadolint", DOCKERFILE])


def test_base_is_the_official_spark_python_image_of_the_pyspark_in_use() -> None:
    assert ARGS["SPARK_VERSION"] == pyspark.__version__ == VALUES["stream"]["sparkVersion"]
    assert ARGS["SPARK_IMAGE"] == "spark:${SPARK_VERSION}-scala2.13-java17-python3-ubuntu"
    assert [arg for kind, arg in INSTRUCTIONS if kind == "FROM"] == ["${SPARK_IMAGE}"]


def test_runs_as_the_non_root_user_the_chart_expects() -> None:
    final_user = [arg for kind, arg in INSTRUCTIONS if kind == "USER"][-1]
    uid = ARGS[final_user.strip("${}")] if final_user.startswith("$") else final_user
    assert uid.isdigit() and int(uid) != 0
    assert int(uid) == VALUES["api"]["podSecurityContext"]["runAsUser"]


def test_kafka_connector_is_pinned_and_checksummed_at_build_time() -> None:
    assert ARGS["SCALA_BINARY_VERSION"] == "2.13"
    assert "KAFKA_CONNECTOR_SHA256" in ARGS
    [fetch] = [r for r in RUNS if "spark-sql-kafka-0-10_" in r]
    assert '"spark-sql-kafka-0-10_${SCALA_BINARY_VERSION}" "$SPARK_VERSION"' in fetch
    assert '[ -z "$KAFKA_CONNECTOR_SHA256" ]' in fetch and "exit 1" in fetch
    assert re.search(r'echo "\$KAFKA_CONNECTOR_SHA256 .*spark-sql-kafka-0-10_.*\.jar"\s*\|\s*sha256sum -c -', fetch)


def test_installs_isrwatch_and_the_spark_entry_point_the_chart_runs() -> None:
    [install] = [r for r in RUNS if "/tmp/isrwatch-src" in r]
    assert re.search(r'pip" install --no-cache-dir --no-deps /tmp/isrwatch-src;', install)
    assert '"$venv/bin/isrwatch" --help' in install
    main_file = VALUES["stream"]["mainApplicationFile"].removeprefix("local://")
    assert f"/tmp/isrwatch-src/deploy/spark_main.py {main_file};" in install


def test_dependency_step_keeps_every_dependency_but_pyspark(tmp_path) -> None:
    """Runs the Dockerfile's own requirements one-liner on the real pyproject.toml."""
    [install] = [r for r in RUNS if "/tmp/isrwatch-src" in r]
    code = re.search(r"python\" -c '([^']+)'\s+/tmp/isrwatch-src/pyproject.toml", install).group(1)
    out = run([sys.executable, "-c", code, ROOT / "pyproject.toml"]).stdout.split()
    deps = PYPROJECT["project"]["dependencies"]
    assert out == [d.replace(" ", "") for d in deps if not d.startswith("pyspark")] and len(out) == len(deps) - 1


def test_build_context_keeps_what_pip_install_needs() -> None:
    kept = {line[1:].rstrip("/") for line in (ROOT / "deploy" / "Dockerfile.dockerignore").read_text().splitlines()
            if line.startswith("!")}
    needed = {*(p.split(".")[0] for p in PYPROJECT["tool"]["setuptools"]["packages"]), "pyproject.toml",
              PYPROJECT["project"]["readme"], "deploy/spark_main.py"}  # a subpackage ships with its top directory
    assert needed <= kept


def test_the_installed_package_carries_every_file_of_its_packages(tmp_path) -> None:
    """The image installs a wheel built from the source tree: it must hold every tracked package file
    (the status page, Spark's log4j settings), not only the Python modules."""
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", tmp_path, ROOT])
    [wheel] = tmp_path.glob("isrwatch-*.whl")
    packed = set(zipfile.ZipFile(wheel).namelist())
    tracked = run(["git", "ls-files", *PYPROJECT["tool"]["setuptools"]["packages"]], cwd=ROOT).stdout.split()
    assert tracked and [path for path in tracked if path not in packed] == []


def test_spark_entry_point_is_the_isrwatch_cli() -> None:
    out = run([sys.executable, ROOT / "deploy" / "spark_main.py", "--help"], cwd="/").stdout
    assert out.startswith("usage: isrwatch ")
