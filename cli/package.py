"""Package isrwatch for Spark's executors: a zip for --py-files, or this virtualenv packed for spark.archives.

On a Spark cluster (`isrwatch run --master spark://…`, YARN, spark-submit) the executors run the state function
in their own Python. That Python needs isrwatch and msgspec, pyarrow, pandas and numpy. Two ways to ship them
(deploy/README.md, "Spark standalone and YARN"):

  --zip OUT.zip     the isrwatch package alone, for nodes whose Python has the dependencies:
                    isrwatch run … --spark-conf spark.submit.pyFiles=OUT.zip   (spark-submit: --py-files OUT.zip)
  --venv OUT.tar.gz the virtualenv this isrwatch runs in, with isrwatch in it as a plain package (also when it is
                    an editable install) and without pyspark (executors run their Spark's own); unpacked by Spark:
                    isrwatch run … --spark-conf spark.archives=OUT.tar.gz#environment \\
                        --spark-conf spark.pyspark.python=./environment/bin/python
                    Its bin/python is a copy of the interpreter the venv was made from, which still reads its
                    standard library from there: every node needs that Python at the same path.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import isrwatch
from isrwatch.state.config import ConfigError

from .common import command, say

# What this writes: Spark unpacks a gzipped tar with the system's tar; a plain .tar it unpacks itself, and loses
# the executable bits (the executors then cannot start bin/python).
ARCHIVES = (".tar.gz", ".tgz")
# Left out of a packed venv: the executors' Python workers import their Spark's own pyspark (SPARK_HOME/python/lib,
# always the JVM's version, ahead of site-packages), and isrwatch goes in from the running package.
LEFT_OUT = ("pyspark", "py4j", "isrwatch")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = command(sub, "package", __doc__, main)
    p.add_argument("--zip", dest="zip_out", metavar="OUT.zip", help="write the isrwatch package as a zip")
    p.add_argument(
        "--venv", dest="venv_out", metavar="OUT.tar.gz", help="write this virtualenv packed (.tar.gz or .tgz)"
    )


def main(args: argparse.Namespace) -> int:
    if not args.zip_out and not args.venv_out:
        raise ConfigError("isrwatch package: give --zip OUT.zip and/or --venv OUT.tar.gz")
    if args.zip_out:
        n = write_zip(Path(args.zip_out))
        say(f"wrote {args.zip_out}: the isrwatch package, {n} files (spark.submit.pyFiles / --py-files)")
    if args.venv_out:
        if sys.prefix == sys.base_prefix:
            raise ConfigError(f"isrwatch package --venv: {sys.executable} does not run in a virtualenv")
        n = pack_venv(Path(sys.prefix), Path(args.venv_out))
        say(
            f"wrote {args.venv_out}: the virtualenv {sys.prefix}, {n} files; use "
            f"--spark-conf spark.archives={args.venv_out}#environment "
            "--spark-conf spark.pyspark.python=./environment/bin/python"
        )
    return 0


def package_files() -> Iterator[tuple[Path, str]]:
    """Every file of the running isrwatch package (links followed: an editable install is a tree of links) and its
    name under `isrwatch/`; no bytecode."""
    root = Path(isrwatch.__file__).parent
    for folder, dirs, files in os.walk(root, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if not name.endswith(".pyc"):
                path = Path(folder, name)
                yield path, "isrwatch/" + path.relative_to(root).as_posix()


def write_zip(out: Path) -> int:
    """The package as a zip Python imports from (`isrwatch/__init__.py` at its top); the number of files."""
    out.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, name in package_files():
            zf.write(path.resolve(), name)
            n += 1
    return n


def _site_packages(venv: Path) -> Path:
    found = sorted(venv.glob("lib/python3*/site-packages"))
    if not found:
        raise ConfigError(f"isrwatch package --venv: {venv} has no lib/python3.*/site-packages")
    return found[0]


def _distribution(dist_info: Path) -> str:
    return dist_info.name.split("-", 1)[0].lower().replace("-", "_")


def _left_out(site: Path) -> set[Path]:
    """What of site-packages stays out of the archive: LEFT_OUT's files and isrwatch's editable hooks. Another
    editable install is a ConfigError: its code lives outside the venv, where no executor sees it."""
    skip: set[Path] = set()
    for info in site.glob("*.dist-info"):
        name = _distribution(info)
        record = info / "RECORD"
        if name in LEFT_OUT:
            skip.add(info)
            if record.exists():
                skip |= {(site / line.rsplit(",", 2)[0]).resolve() for line in record.read_text().splitlines() if line}
            continue
        direct = info / "direct_url.json"
        if direct.exists() and json.loads(direct.read_text()).get("dir_info", {}).get("editable"):
            raise ConfigError(
                f"isrwatch package --venv: {name} is an editable install (its code is outside {site}); "
                "install it normally to pack it"
            )
    skip |= {site / name for name in LEFT_OUT}
    skip |= set(site.glob("__editable__*isrwatch*"))
    return skip


def _inside(path: Path, venv: Path) -> Path:
    """What to archive for `path`: itself, or for a link that leaves the venv (bin/python3.11 to the interpreter it
    was made from) the file it names, as `python -m venv --copies` would have it: Spark refuses to unpack an archive
    with a link outside it."""
    return path.resolve() if path.is_symlink() and not path.resolve().is_relative_to(venv) else path


def pack_venv(venv: Path, out: Path) -> int:
    """The virtualenv `venv` as a gzipped tar archive with the running isrwatch package in its site-packages; links
    within it stay links. The number of files."""
    if not out.name.endswith(ARCHIVES):
        raise ConfigError(f"isrwatch package --venv {out}: the name must end in {', '.join(ARCHIVES)}")
    venv = venv.resolve()
    site = _site_packages(venv)
    skip = _left_out(site)
    out.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    # gzip level 1: a third of the CPU time of level 6 for about 14 % more bytes.
    with tarfile.open(out, "w:gz", compresslevel=1) as tar:
        for folder, dirs, files in os.walk(venv):
            here = Path(folder)
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and here / d not in skip)
            for name in sorted(files):
                path = here / name
                if path not in skip and path.resolve() not in skip and not name.endswith(".pyc"):
                    tar.add(_inside(path, venv), path.relative_to(venv).as_posix(), recursive=False)
                    n += 1
        for path, name in package_files():
            tar.add(path.resolve(), (site / name).relative_to(venv).as_posix(), recursive=False)
            n += 1
    return n
