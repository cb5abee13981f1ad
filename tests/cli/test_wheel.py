"""isrwatch as a user installs it: `pip wheel .` (not an editable install) in a fresh venv that holds the wheel and
its declared dependencies only (no dev extra: no httpx, no pytest), run away from the clone. The wheel must hold one
top-level import package, `isrwatch` (a generic `state`, `streaming` or `api` would clash with other distributions
in site-packages), and every command must run its real path from it: replay, simulate, run, serve, bench, lab.

A real `pip install` of the wheel's dependencies takes about two minutes on the 2-core machine even from pip's
cache (pyspark alone is 430 MB), so the venv links them instead: the closure of the wheel's own Requires-Dist over
the distributions the project's venv installed, linked into the new venv's site-packages, and nothing else
(`pip check` there holds the closure to the wheel's declared version ranges)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from email.parser import Parser
from importlib.metadata import Distribution, distribution
from pathlib import Path

import httpx
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.net import serving_command
from tests.support.replays import SCENARIOS

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = SCENARIOS / "01-stuck-follower-shrink"
DEV_ONLY = ("httpx", "pytest", "hypothesis", "ruff", "schemathesis", "mypy")


class Venv:
    def __init__(self, path: Path, home: Path) -> None:
        self.path = path
        self.home = home  # the working directory: no clone, nothing of the project's on sys.path
        # No ISRWATCH_TOOLS (make exports the clone's) nor ISRWATCH_STORE: the user's cache directory, which the test
        # points at the clone's provisioned jars so that nothing is downloaded again, and the default store.
        drop = ("ISRWATCH_TOOLS", "ISRWATCH_STORE", "PYTHONPATH", "VIRTUAL_ENV")
        self.env = {k: v for k, v in os.environ.items() if k not in drop}
        self.env |= {"XDG_CACHE_HOME": str(home / "cache"), "PATH": f"{path / 'bin'}{os.pathsep}{os.environ['PATH']}"}

    def run(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.path / "bin" / argv[0]), *argv[1:]],
            cwd=self.home,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    @contextmanager
    def serving(self, *options: str) -> Iterator[str]:
        """`isrwatch serve OPTIONS` on a port the kernel picks; yields its base URL."""
        with serving_command(
            [str(self.path / "bin" / "isrwatch"), "serve", "--port", "0", *options], cwd=self.home, env=self.env
        ) as (url, _):
            yield url


def _declared(wheel: Path) -> list[Requirement]:
    """The wheel's own Requires-Dist, without its extras' (dev)."""
    with zipfile.ZipFile(wheel) as whl:
        (name,) = [n for n in whl.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(whl.read(name).decode())
    requirements = [Requirement(text) for text in metadata.get_all("Requires-Dist") or ()]
    return [r for r in requirements if r.marker is None or r.marker.evaluate({"extra": ""})]


def _closure(requirements: list[Requirement]) -> list[Distribution]:
    """The installed distributions that `requirements` need, transitively (each with the extras asked of it)."""
    found: dict[str, Distribution] = {}
    todo = [(r.name, frozenset(r.extras)) for r in requirements]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, extras = todo.pop()
        if (canonicalize_name(name), extras) in seen:
            continue
        seen.add((canonicalize_name(name), extras))
        dist = found.setdefault(canonicalize_name(name), distribution(name))
        for text in dist.requires or ():
            r = Requirement(text)
            if r.marker is None or any(r.marker.evaluate({"extra": e}) for e in {"", *extras}):
                todo.append((r.name, frozenset(r.extras)))
    return list(found.values())


def _link(dists: list[Distribution], site: Path) -> None:
    """Link each distribution's top-level files and directories (its packages and its .dist-info) into `site`."""
    for dist in dists:
        base = Path(dist.locate_file(""))
        tops = {Path(f).parts[0] for f in dist.files or () if not str(f).startswith("..")}
        for top in tops:
            target = site / top
            if not target.exists() and (base / top).exists():
                target.symlink_to(base / top)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    (found,) = out.glob("isrwatch-*.whl")
    return found


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    home = tmp_path_factory.mktemp("home")
    path = home / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=120)
    installed = Venv(path, home)
    done = installed.run("pip", "install", "-q", "--no-deps", "--no-index", str(wheel), timeout=300)
    assert done.returncode == 0, done.stderr
    site = Path(
        installed.run("python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip()
    )
    _link(_closure(_declared(wheel)), site)
    check = installed.run("python", "-m", "pip", "check")
    assert check.returncode == 0, check.stdout + check.stderr
    cache = home / "cache" / "isrwatch"
    cache.mkdir(parents=True)
    tools = ROOT / ".tools"
    for name in ("jars", "m2"):
        (cache / name).symlink_to(tools / name)
    return installed


def test_the_wheel_holds_one_top_level_package_isrwatch(wheel: Path, venv: Venv) -> None:
    with zipfile.ZipFile(wheel) as whl:
        top = {name.split("/")[0] for name in whl.namelist()}
        names = set(whl.namelist())
    assert top == {"isrwatch", wheel.name.split("-py3")[0] + ".dist-info"}
    for data in (
        "isrwatch/api/static/index.html",
        "isrwatch/api/static/timeline.js",
        "isrwatch/api/static/echarts.min.js",  # the page's chart library ships inside: no CDN, works offline
        "isrwatch/api/static/echarts.LICENSE",
        "isrwatch/lab/maven/kafka.xml",
        "isrwatch/streaming/log4j2.properties",
    ):
        assert data in names
    # The venv imports isrwatch from the wheel alone, one portion, in its own site-packages; no dev-only package.
    done = venv.run(
        "python", "-c", "import json, isrwatch.cli; print(json.dumps([list(isrwatch.__path__), isrwatch.cli.__file__]))"
    )
    assert done.returncode == 0, done.stderr
    portions, cli = json.loads(done.stdout)
    assert len(portions) == 1 and Path(portions[0]).is_relative_to(venv.path), portions
    assert Path(cli).is_relative_to(venv.path)
    for module in DEV_ONLY:
        assert venv.run("python", "-c", f"import {module}").returncode != 0, f"{module} is importable"
    # Every module of the package imports with the declared dependencies alone (bench latency once needed httpx).
    every = "import importlib, pkgutil, isrwatch; [importlib.import_module(m.name) for m in "
    every += "pkgutil.walk_packages(isrwatch.__path__, 'isrwatch.') if not m.name.endswith('__main__')]"
    done = venv.run("python", "-c", every)
    assert done.returncode == 0, done.stderr


def test_version_help_and_usage_errors_from_the_wheel(venv: Venv) -> None:
    assert venv.run("isrwatch", "--version").stdout == "isrwatch 0.1.0\n"
    assert venv.run("isrwatch", "--help").returncode == 0
    lab_help = venv.run("isrwatch", "lab", "up", "--help")
    assert lab_help.returncode == 0 and "--agent" in lab_help.stdout
    nope = venv.run("isrwatch", "bench", "nope")
    assert nope.returncode == 2 and "isrwatch bench: error: unknown benchmark 'nope'" in nope.stderr


def test_replay_into_the_default_store_then_serve_it_from_the_wheel(venv: Venv) -> None:
    """replay --store (the default store), then serve with no --store: the page, its files, the replayed
    partition, and the docs with their files."""
    until = (SCENARIOS / f"{SCENARIO.name}.until").read_text().strip()
    done = venv.run(
        "isrwatch", "replay", f"{SCENARIO}.events.jsonl", "--config", f"{SCENARIO}.config.json", "--until", until,
        "--out", "out", "--store",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    decisions = [json.loads(line) for line in (venv.home / "out" / "decisions.jsonl").read_text().splitlines()]
    assert [d["kind"] for d in decisions] == ["leader_and_isr", "shrink"]
    assert (venv.home / "var" / "isrwatch.db").is_file()
    with venv.serving() as url:
        page = httpx.get(url + "/", timeout=10)
        assert page.status_code == 200 and "<script" in page.text
        assert httpx.get(url + "/static/app.js", timeout=10).status_code == 200
        partitions = httpx.get(url + "/v1/partitions", timeout=10).json()
        assert [(p["topic"], p["partition"]) for p in partitions["partitions"]] == [("orders", 0)], partitions
        assert httpx.get(url + "/readyz", params={"x": 1}, timeout=10).status_code == 422
        docs = httpx.get(url + "/docs", timeout=10).text
        for asset in re.findall(r"""(?:src|href|url)\s*[=:]\s*['"](/[^'"]+)['"]""", docs):
            assert httpx.get(url + asset, timeout=10).status_code == 200, asset


def test_simulate_then_run_the_stream_on_its_files_from_the_wheel(venv: Venv) -> None:
    """simulate a stall into rotating files, then the streaming job (local Spark) over them into a store."""
    done = venv.run(
        "isrwatch", "simulate", "--fault", "stall:broker=2:start=5s", "--duration", "30s", "--topic", "t:3:3",
        "--speed", "0", "--set", "replica_lag_time_max_ms=10000", "--out-dir", "events", "--rotate", "60s",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert list((venv.home / "events").glob("*.jsonl"))
    store = f"sqlite:///{venv.home / 'run.db'}"
    done = venv.run(
        "isrwatch", "run", "--source", "files:events", "--available-now", "--store", store, "--checkpoint", "cp",
        "--set", "replica_lag_time_max_ms=10000", "--master", "local[1]", "--quiet", timeout=420,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    with venv.serving("--store", store) as url:
        shrinks = httpx.get(url + "/v1/decisions", params={"kind": "shrink", "limit": 1000}, timeout=10).json()
        assert shrinks["decisions"] and all(d["replicas_changed"] == [2] for d in shrinks["decisions"]), shrinks


def test_benchmarks_from_the_wheel(venv: Venv) -> None:
    engine = venv.run("isrwatch", "bench", "engine", "--events", "20000", "--partitions", "200", timeout=180)
    assert engine.returncode == 0, engine.stderr
    assert re.search(r"engine: .*events/s", engine.stdout), engine.stdout
    api = venv.run(
        "isrwatch", "bench", "api", "--partitions", "300", "--rate", "50", "--seconds", "1", timeout=180
    )  # serve in its own process, the load over http.client: the path bench latency takes too
    assert api.returncode == 0, api.stderr
    assert "isr:" in api.stdout and "metrics:" in api.stdout, api.stdout


def test_the_lab_runs_from_the_wheel_with_its_jars_in_the_user_cache(venv: Venv) -> None:
    """`lab up` finds its poms in the package and its jars in ~/.cache/isrwatch (XDG_CACHE_HOME here), not in a
    clone; its helper processes run the venv's isrwatch."""
    lab = venv.home / "lab"
    try:
        up = venv.run(
            "isrwatch", "lab", "up", "--dir", str(lab), "--kafka", "3.9", "--rate", "0", "--topics", "t:1", timeout=240
        )
        assert up.returncode == 0, up.stderr
        brokers = json.loads((lab / "lab.json").read_text())["brokers"]
        assert len(brokers) == 3
        classpath = brokers[0]["argv"][brokers[0]["argv"].index("-cp") + 1]
        assert classpath == str(venv.home / "cache" / "isrwatch" / "jars" / "kafka" / "*")
    finally:
        down = venv.run("isrwatch", "lab", "down", "--dir", str(lab), timeout=120)
    assert down.returncode == 0, down.stderr
