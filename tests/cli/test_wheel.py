"""isrwatch as a user installs it: `pip wheel .` (not an editable install) into a fresh venv, run away from the
clone. The wheel must hold one top-level import package, `isrwatch` (a generic `state`, `streaming` or `api`
would clash with other distributions in site-packages), and every command must find what it needs in the
package: the status page, Spark's log4j settings, the lab's Maven poms.

To keep the test quick the venv borrows the third-party dependencies from the project's venv (a .pth line after
its own site-packages, whose .pth files Python does not process, so the clone's editable install stays out);
isrwatch itself comes only from the wheel, which the test checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api import test_status_page as status_page
from tests.replays import SCENARIOS

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = SCENARIOS / "01-stuck-follower-shrink"


class Venv:
    def __init__(self, path: Path, home: Path) -> None:
        self.path = path
        self.home = home  # the working directory: no clone, nothing of the project's on sys.path
        # No ISRWATCH_TOOLS (make exports the clone's): the user's cache directory, which the test points at the
        # clone's provisioned jars so that nothing is downloaded again.
        self.env = {k: v for k, v in os.environ.items() if k not in ("ISRWATCH_TOOLS", "PYTHONPATH", "VIRTUAL_ENV")}
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
    done = installed.run("pip", "install", "-q", "--no-deps", str(wheel), timeout=300)
    assert done.returncode == 0, done.stderr
    site = Path(
        installed.run("python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip()
    )
    (site / "zz-isrwatch-test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
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
    # The venv imports isrwatch from the wheel alone, one portion, in its own site-packages.
    done = venv.run(
        "python", "-c", "import json, isrwatch.cli; print(json.dumps([list(isrwatch.__path__), isrwatch.cli.__file__]))"
    )
    assert done.returncode == 0, done.stderr
    portions, cli = json.loads(done.stdout)
    assert len(portions) == 1 and Path(portions[0]).is_relative_to(venv.path), portions
    assert Path(cli).is_relative_to(venv.path)


def test_help_replay_and_lab_help_from_the_wheel(venv: Venv) -> None:
    assert venv.run("isrwatch", "--help").returncode == 0
    lab_help = venv.run("isrwatch", "lab", "up", "--help")
    assert lab_help.returncode == 0 and "--agent" in lab_help.stdout
    until = (SCENARIOS / f"{SCENARIO.name}.until").read_text().strip()
    store = venv.home / "isrwatch.db"
    done = venv.run(
        "isrwatch", "replay", f"{SCENARIO}.events.jsonl", "--config", f"{SCENARIO}.config.json", "--until", until,
        "--out", "out", "--store", str(store),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    decisions = [json.loads(line) for line in (venv.home / "out" / "decisions.jsonl").read_text().splitlines()]
    assert [d["kind"] for d in decisions] == ["leader_and_isr", "shrink"]


@pytest.fixture
def serving(venv: Venv) -> Iterator[str]:
    isrwatch = [str(venv.path / "bin" / "isrwatch")]
    with status_page.serving(str(venv.home / "isrwatch.db"), isrwatch=isrwatch, cwd=venv.home, env=venv.env) as url:
        yield url


def test_serve_from_the_wheel_answers_with_the_status_page_and_the_replayed_store(venv: Venv, serving: str) -> None:
    page = httpx.get(serving + "/", timeout=10)
    assert page.status_code == 200 and "<script" in page.text
    assert httpx.get(serving + "/static/app.js", timeout=10).status_code == 200
    partitions = httpx.get(serving + "/v1/partitions", timeout=10).json()
    assert [(p["topic"], p["partition"]) for p in partitions["partitions"]] == [("orders", 0)], partitions


def test_the_lab_runs_from_the_wheel_with_its_jars_in_the_user_cache(venv: Venv) -> None:
    """`lab up` finds its poms in the package and its jars in ~/.cache/isrwatch (XDG_CACHE_HOME here), not in a
    clone; its helper processes run the venv's isrwatch."""
    lab = venv.home / "lab"
    try:
        up = venv.run("isrwatch", "lab", "up", "--dir", str(lab), "--rate", "0", "--topics", "t:1", timeout=240)
        assert up.returncode == 0, up.stderr
        brokers = json.loads((lab / "lab.json").read_text())["brokers"]
        assert len(brokers) == 3
        classpath = brokers[0]["argv"][brokers[0]["argv"].index("-cp") + 1]
        assert classpath == str(venv.home / "cache" / "isrwatch" / "jars" / "kafka" / "*")
    finally:
        down = venv.run("isrwatch", "lab", "down", "--dir", str(lab), timeout=120)
    assert down.returncode == 0, down.stderr
