"""deploy/Dockerfile, checked without a Docker engine: hadolint, and what the image promises statically."""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest
import yaml

from tests.support.deploy import BIN, CHART, ROOT, run
from tests.support.net import free_port

DOCKERFILE = ROOT / "deploy" / "Dockerfile"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# The rooms: top-level folders of the repository, each mapped to a package of `isrwatch` at build time.
ROOMS = {package: folder for package, folder in PYPROJECT["tool"]["setuptools"]["package-dir"].items()}
VALUES = yaml.safe_load((CHART / "values.yaml").read_text())


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(
        r"\\\n",
        " ",
        "\n".join(line for line in DOCKERFILE.read_text().splitlines() if not line.lstrip().startswith("#")),
    )
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
SHELL = json.loads([arg for kind, arg in INSTRUCTIONS if kind == "SHELL"][-1])
[FETCH] = [r for r in RUNS if "SHA256SUMS" in r]
FETCH_DIR = re.search(r"cd (/\S+);", FETCH).group(1)


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


PIN_LINE = re.compile(r"([0-9a-f]{64})  ((?:[A-Za-z0-9_.-]+/)+([A-Za-z0-9_.-]+)/([0-9][A-Za-z0-9_.-]*)/\3-\4\.jar)")


def _pins() -> list[tuple[str, str]]:
    """(sha256, Maven Central path) of every line of the pin file, which must be plain `sha256sum` format."""
    pins = []
    for line in PIN_FILE.read_text().splitlines():
        match = PIN_LINE.fullmatch(line)
        assert match, f"{PIN_FILE.name}: not `SHA256  group/path/artifact/version/artifact-version.jar`: {line!r}"
        pins.append((match.group(1), match.group(2)))
    return pins


def _artifact(jar_name: str) -> str:
    """spark-sql-kafka-0-10_2.13-4.2.0.jar -> spark-sql-kafka-0-10_2.13 (Maven's artifact-version.jar)."""
    return re.sub(r"-[0-9][^-]*\.jar$", "", jar_name)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _provisioned_jars() -> Path:
    assert PROVISIONED.is_dir() and any(PROVISIONED.glob("*.jar")), (
        f"{PROVISIONED} is missing or empty: `bash scripts/provision.sh` (run by `make test`) resolves the Kafka "
        "connector's runtime dependencies into it"
    )
    return PROVISIONED


PIN_FILE = ROOT / "deploy" / "spark-kafka-jars.sha256"
PROVISIONED = ROOT / ".tools" / "jars" / "spark-kafka"
PYSPARK_JARS = Path(pyspark.__file__).parent / "jars"
CONNECTOR = f"org/apache/spark/spark-sql-kafka-0-10_2.13/{pyspark.__version__}/"


def test_pin_file_pins_the_connector_of_the_pyspark_in_use_and_only_what_spark_lacks() -> None:
    paths = [path for _, path in _pins()]
    connector = f"{CONNECTOR}spark-sql-kafka-0-10_2.13-{pyspark.__version__}.jar"
    assert [p for p in paths if p.startswith(CONNECTOR)] == [connector]
    artifacts = [_artifact(Path(p).name) for p in paths]
    assert len(set(artifacts)) == len(artifacts), artifacts
    shipped = {_artifact(jar.name) for jar in PYSPARK_JARS.glob("*.jar")}
    assert shipped and not shipped & set(artifacts), "Spark already ships these: " + ", ".join(shipped & set(artifacts))


def test_pinned_jars_are_the_provisioned_connector_set() -> None:
    """The image gets exactly what provisioning resolves for the connector's coordinates (Maven, runtime scope,
    minus what PySpark's jars/ has), byte for byte: nothing missing, nothing extra, every SHA-256 equal."""
    provisioned = {jar.name: _sha256(jar) for jar in _provisioned_jars().glob("*.jar")}
    assert provisioned == {Path(path).name: sha256 for sha256, path in _pins()}


def test_image_fetches_the_pinned_jars_from_maven_central_by_their_paths() -> None:
    assert ARGS["SCALA_BINARY_VERSION"] == "2.13"
    assert ARGS["MAVEN_REPOSITORY"] == "https://repo1.maven.org/maven2"
    [copy] = [arg for kind, arg in INSTRUCTIONS if kind == "COPY" and "spark-kafka-jars.sha256" in arg]
    source, target = copy.split()
    assert (ROOT / source) == PIN_FILE and target == f"{FETCH_DIR}/SHA256SUMS"
    assert '"$MAVEN_REPOSITORY/$path"' in FETCH and "sha256sum --strict -c SHA256SUMS" in FETCH


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def maven_mirror(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A Maven-layout repository over real HTTP on loopback holding the provisioned jars at their pinned paths."""
    root = tmp_path / "mirror"
    jars = _provisioned_jars()
    for _, path in _pins():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(jars / Path(path).name, root / path)
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", free_port()), functools.partial(_QuietHandler, directory=str(root))
    )
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", root
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _run_fetch_step(
    tmp_path: Path, repository: str, pins: str | None = None, spark_version: str = ARGS["SPARK_VERSION"]
) -> tuple[subprocess.CompletedProcess, Path]:
    """The Dockerfile's connector step, run as the build runs it (its SHELL, the build arguments in the
    environment) against a Spark home whose jars/ has the names of PySpark's jars."""
    assert shutil.which("wget"), "wget is missing: the image's download step needs it (scripts/provision.sh)"
    work = tmp_path / "fetch"
    work.mkdir()
    (work / "SHA256SUMS").write_text(PIN_FILE.read_text() if pins is None else pins)
    spark_jars = tmp_path / "spark" / "jars"
    spark_jars.mkdir(parents=True)
    for jar in PYSPARK_JARS.glob("*.jar"):
        (spark_jars / jar.name).touch()
    env = {
        "PATH": os.environ["PATH"],
        "SPARK_HOME": str(spark_jars.parent),
        "SPARK_VERSION": spark_version,
        "SCALA_BINARY_VERSION": ARGS["SCALA_BINARY_VERSION"],
        "MAVEN_REPOSITORY": repository,
    }
    proc = subprocess.run(
        [*SHELL, FETCH.replace(FETCH_DIR, str(work))],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc, spark_jars


def test_build_step_installs_exactly_the_pinned_jars(tmp_path: Path, maven_mirror: tuple[str, Path]) -> None:
    proc, spark_jars = _run_fetch_step(tmp_path, maven_mirror[0])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    added = {jar.name: _sha256(jar) for jar in spark_jars.glob("*.jar") if jar.stat().st_size}
    assert added == {Path(path).name: sha256 for sha256, path in _pins()}


def _tamper(mirror: Path, path: str) -> None:
    with open(mirror / path, "ab") as jar:
        jar.write(b"\0")


BUILD_FAILURES = {
    "a jar that is not the pinned one": (lambda mirror, path: _tamper(mirror, path), {}, "FAILED"),
    "a jar the repository does not serve": (lambda mirror, path: (mirror / path).unlink(), {}, "404"),
    "an artifact Spark already ships": (
        lambda mirror, path: None,
        {"pins": PIN_FILE.read_text() + "0" * 64 + "  org/lz4/lz4-java/1.8.0/lz4-java-1.8.0.jar\n"},
        "already has lz4-java",
    ),
    "no connector for the Spark version": (
        lambda mirror, path: None,
        {"spark_version": "9.9.9"},
        "pins no spark-sql-kafka-0-10_2.13 9.9.9",
    ),
}


@pytest.mark.parametrize("case", BUILD_FAILURES)
def test_build_step_stops_and_installs_nothing(case: str, tmp_path: Path, maven_mirror: tuple[str, Path]) -> None:
    spoil, kwargs, message = BUILD_FAILURES[case]
    url, mirror = maven_mirror
    kafka_clients = next(path for _, path in _pins() if "/kafka-clients/" in path)
    spoil(mirror, kafka_clients)
    proc, spark_jars = _run_fetch_step(tmp_path, url, **kwargs)
    assert proc.returncode != 0 and message in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert not [jar for jar in spark_jars.glob("*.jar") if jar.stat().st_size]


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
    kept = {
        line[1:].rstrip("/")
        for line in (ROOT / "deploy" / "Dockerfile.dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    needed = {
        *ROOMS.values(),
        "pyproject.toml",
        PYPROJECT["project"]["readme"],
        "deploy/spark_main.py",
        # what a package file links to (api/static/alerts.md: the runbook, docs/alerts.md)
        *(
            str(p.resolve().relative_to(ROOT))
            for room in ROOMS.values()
            for p in (ROOT / room).rglob("*")
            if p.is_symlink()
        ),
    }
    assert needed <= kept and "docs/alerts.md" in needed


def test_the_installed_package_carries_every_file_of_its_packages(tmp_path) -> None:
    """The image installs a wheel built from the source tree: it must hold every tracked package file
    (the status page, Spark's log4j settings), not only the Python modules."""
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", tmp_path, ROOT])
    [wheel] = tmp_path.glob("isrwatch-*.whl")
    packed = set(zipfile.ZipFile(wheel).namelist())
    for package, folder in ROOMS.items():
        tracked = run(["git", "ls-files", folder], cwd=ROOT).stdout.split()
        in_wheel = [package.replace(".", "/") + path.removeprefix(folder) for path in tracked]
        assert tracked and [path for path in in_wheel if path not in packed] == []


def test_spark_entry_point_is_the_isrwatch_cli() -> None:
    out = run([sys.executable, ROOT / "deploy" / "spark_main.py", "--help"], cwd="/").stdout
    assert out.startswith("usage: isrwatch ")
