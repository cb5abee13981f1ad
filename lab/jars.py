"""Jars by Maven coordinates, fetched once into the tools directory and reused: nothing downloads at test or run time.

Sets, each from a small pom shipped with the package (`maven/`) and copied with `dependency:copy-dependencies`
(runtime scope) into its own directory:

- `<tools>/jars/kafka/`: the broker, ZooKeeper and tools classpath (Kafka 3.9.2, reload4j; `kafka.xml`);
- `<tools>/jars/kafka-<version>/`: a Kafka 4.x release's broker and tools classpath (log4j2; `kafka4.xml` with
  `kafka.version` set to the release), one directory per release `isrwatch lab up --kafka` ran;
- `<tools>/jars/spark-kafka/`: Spark's Kafka connector for the installed PySpark and those of its runtime
  dependencies whose artifact PySpark's own `jars/` does not already ship (so nothing is on the
  classpath twice in two versions).

A set is complete when its stamp (the pom's hash, the properties it was resolved with, the files)
matches and every file is there; then nothing runs. `python -m isrwatch.lab.jars` provisions what the test suite
needs: Kafka 3.9.2, Kafka 4.4.0 (KAFKA_NEWEST) and the Spark connector; other 4.x releases come on first use.

`<tools>` is `$ISRWATCH_TOOLS`, else `.tools/` of the clone isrwatch runs from, else the user's cache directory
(`$XDG_CACHE_HOME/isrwatch`, `~/.cache/isrwatch`; `~/Library/Caches/isrwatch` on macOS): an installed wheel
needs no checkout.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

POMS = Path(__file__).with_name("maven")
Progress = Callable[[str], None]


class JarsError(RuntimeError):
    """Provisioning failed or cannot run here; the message says why and what to do."""


def checkout() -> Path | None:
    """The isrwatch clone this module runs from, if any (a clone's install links its modules back into it)."""
    root = Path(__file__).resolve().parents[1]
    return root if (root / "pyproject.toml").is_file() and (root / "lab" / "jars.py").is_file() else None


def user_cache_dir() -> Path:
    """The platform's per-user cache directory for isrwatch."""
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "isrwatch"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "isrwatch"


def tools_dir() -> Path:
    """Where provisioned tools live: $ISRWATCH_TOOLS, else a clone's .tools/, else the user's cache directory."""
    if env := os.environ.get("ISRWATCH_TOOLS"):
        return Path(env)
    root = checkout()
    return root / ".tools" if root is not None else user_cache_dir()


def default_agent() -> Path:
    """The isrwatch-agent jar `isrwatch lab up --agent` attaches without a JAR: $ISRWATCH_AGENT, else a clone's
    agent/target/isrwatch-agent.jar (`make agent` builds it), else isrwatch-agent.jar in the tools directory."""
    if env := os.environ.get("ISRWATCH_AGENT"):
        return Path(env)
    root = checkout()
    return root / "agent" / "target" / "isrwatch-agent.jar" if root is not None else tools_dir() / "isrwatch-agent.jar"


@dataclass(frozen=True)
class JarSet:
    name: str  # the directory under <tools>/jars/
    pom: str  # file under maven/
    properties: tuple[tuple[str, str], ...] = ()
    shipped: Path | None = None  # a directory of jars whose artifacts are left out

    @property
    def directory(self) -> Path:
        return tools_dir() / "jars" / self.name

    @property
    def stamp_path(self) -> Path:
        return tools_dir() / "jars" / f"{self.name}.stamp"

    def inputs(self) -> dict:
        pom = POMS / self.pom
        digest = hashlib.sha256(pom.read_bytes()).hexdigest() if pom.is_file() else None
        return {"pom_sha256": digest, "properties": dict(self.properties)}


def pyspark_jars() -> Path:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise JarsError("PySpark is not installed in this Python (run `make setup`)")
    return Path(spec.origin).parent / "jars"


# The Kafka releases on Maven Central the lab runs: 3.9.2, the last line with ZooKeeper mode, and every 4.x release
# (KRaft only) up to the newest, 4.4.0. A line (`4.4`) stands for its newest release.
ZOOKEEPER_RELEASE = "3.9.2"
KRAFT_RELEASES = (
    "4.0.0", "4.0.1", "4.0.2", "4.1.0", "4.1.1", "4.1.2", "4.2.0", "4.2.1", "4.2.2", "4.3.0", "4.3.1", "4.4.0",
)  # fmt: skip
KAFKA_NEWEST = KRAFT_RELEASES[-1]


def kafka_release(version: str) -> str:
    """`--kafka VERSION` -> the release it names: an exact one (`4.3.1`) or a line's newest (`4.3` -> 4.3.1)."""
    releases = (ZOOKEEPER_RELEASE, *KRAFT_RELEASES)
    if version in releases:
        return version
    line = [r for r in releases if r.rsplit(".", 1)[0] == version]
    if not line:
        lines = sorted({r.rsplit(".", 1)[0] for r in releases})
        raise JarsError(
            f"--kafka {version}: not a Kafka release the lab runs; give a line ({', '.join(lines)}: its newest "
            f"release) or an exact release ({', '.join(releases)})"
        )
    return line[-1]


def kafka_set(release: str = ZOOKEEPER_RELEASE) -> JarSet:
    """The jars of a Kafka release: 3.9.2 from kafka.xml, a 4.x release from kafka4.xml with its version."""
    if release == ZOOKEEPER_RELEASE:
        return JarSet("kafka", "kafka.xml")
    return JarSet(f"kafka-{release}", "kafka4.xml", (("kafka.version", release),))


def spark_kafka_set() -> JarSet:
    return JarSet("spark-kafka", "spark-kafka.xml", (("spark.version", version("pyspark")),), pyspark_jars())


def jars(jar_set: JarSet) -> list[Path] | None:
    """The set's jars if provisioning completed for the current inputs, else None."""
    try:
        stamp = json.loads(jar_set.stamp_path.read_text())
    except (OSError, ValueError):
        return None
    if {k: stamp.get(k) for k in ("pom_sha256", "properties")} != jar_set.inputs():
        return None
    files = [jar_set.directory / name for name in stamp.get("files", [])]
    return files if files and all(f.is_file() for f in files) else None


_LISTED = re.compile(r"^\s+([^:\s]+):([^:\s]+):([^:\s]+)(?::([^:\s]+))?:([^:\s]+):(compile|runtime)\b")


def _listed_files(listing: str) -> dict[str, str]:
    """`dependency:list` output -> {jar file name: artifactId}."""
    files = {}
    for line in listing.splitlines():
        m = _LISTED.match(line)
        if m:
            _, artifact, kind, classifier, ver, _ = m.groups()
            if kind == "jar":
                files[f"{artifact}-{ver}{'-' + classifier if classifier else ''}.jar"] = artifact
    return files


def artifacts_in(directory: Path) -> set[str]:
    """Artifact names of the jars in a directory: a name-VERSION.jar file, VERSION starting with a digit."""
    return {m.group(1) for jar in directory.glob("*.jar") if (m := re.match(r"^(.+?)-\d.*\.jar$", jar.name))}


def provision(jar_set: JarSet, progress: Progress) -> list[Path]:
    """Resolve the set with Maven into its directory (replacing what was there) and stamp it."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarsError("Maven (mvn) is not installed: run `bash scripts/provision.sh` (or apt-get install maven)")
    if not (POMS / jar_set.pom).is_file():
        raise JarsError(f"{POMS / jar_set.pom} is missing: this isrwatch install is incomplete (reinstall it)")
    tools = tools_dir()
    (tools / "jars").mkdir(parents=True, exist_ok=True)
    progress(f"fetching the {jar_set.name} jars with Maven into {jar_set.directory} (once; cached in {tools}/m2)")
    with tempfile.TemporaryDirectory(dir=tools / "jars", prefix=f".{jar_set.name}-") as tmp:
        out, listing = Path(tmp) / "jars", Path(tmp) / "list.txt"
        argv = [
            mvn,
            "-B",
            "-q",
            "-f",
            str(POMS / jar_set.pom),
            f"-Dmaven.repo.local={tools / 'm2'}",
            *(f"-D{k}={v}" for k, v in jar_set.properties),
            "dependency:copy-dependencies",
            "dependency:list",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={out}",
            f"-DoutputFile={listing}",
        ]
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise JarsError(f"Maven could not resolve {jar_set.pom} ({' '.join(argv[5:])}):\n{tail}")
        files = _listed_files(listing.read_text())
        missing = [name for name in files if not (out / name).is_file()]
        if missing:
            raise JarsError(f"Maven listed but did not copy {', '.join(missing)}")
        if jar_set.shipped is not None:
            shipped = artifacts_in(jar_set.shipped)
            for name, artifact in files.items():
                if artifact in shipped:
                    (out / name).unlink()
            files = {name: a for name, a in files.items() if a not in shipped}
        if jar_set.directory.exists():
            shutil.rmtree(jar_set.directory)
        out.rename(jar_set.directory)
    jar_set.stamp_path.write_text(json.dumps({**jar_set.inputs(), "files": sorted(files)}, indent=1) + "\n")
    return [jar_set.directory / name for name in sorted(files)]


def ensure(jar_set: JarSet, progress: Progress) -> list[Path]:
    """The set's jars, provisioned first if they are not complete."""
    return jars(jar_set) or provision(jar_set, progress)


def spark_kafka_jars() -> list[Path]:
    """Spark's Kafka connector jars if provisioned for the installed PySpark, else [] (never runs Maven)."""
    try:
        return jars(spark_kafka_set()) or []
    except (JarsError, PackageNotFoundError):  # PySpark not installed as a distribution (e.g. the image's own)
        return []


def main() -> int:
    """Provision what the test suite needs (scripts/provision.sh runs this)."""

    def say(message: str) -> None:
        print(f"provision: {message}", file=sys.stderr, flush=True)

    try:
        for jar_set in (kafka_set(), kafka_set(KAFKA_NEWEST), spark_kafka_set()):
            files = ensure(jar_set, say)
            say(f"{jar_set.name}: {len(files)} jars in {jar_set.directory}")
    except JarsError as exc:
        print(f"provision: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
