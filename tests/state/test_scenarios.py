"""The conformance scenarios, run through the `isrwatch replay` command itself: the public five (Kafka 2.x, the
default rules), the project's own, one per Kafka rule set (SPEC §4.8), each naming its `kafka_version`, and the
AlterPartition ones (SPEC §4.9), each named after the Kafka test it restates."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCENARIOS = Path(__file__).parent.parent / "scenarios"
NAMES = sorted(p.name.removesuffix(".events.jsonl") for p in SCENARIOS.glob("*.events.jsonl"))


def _objects(path: Path) -> list[str]:
    """A file's objects as canonical JSON strings, sorted: comparison as a multiset."""
    lines = path.read_text().splitlines()
    return sorted(json.dumps(json.loads(line), sort_keys=True) for line in lines if line.strip())


PUBLIC = (
    "01-stuck-follower-shrink",
    "02-slow-follower-shrink",
    "03-expand-on-catch-up",
    "04-stale-leader-and-isr",
    "05-propagation-linger-and-max-delay",
)
OWN = [name for name in NAMES if name not in PUBLIC and name[:2] < "09"]
# Kafka 3.9's PartitionTest and AlterPartitionManagerTest (and, for the ELR, PartitionChangeBuilderTest) restated.
ALTER_PARTITION = [name for name in NAMES if name[:2] >= "09"]


def _config(name: str) -> dict:
    return json.loads((SCENARIOS / f"{name}.config.json").read_text())


def test_all_public_scenarios_are_present() -> None:
    assert len(PUBLIC) == 5 and set(PUBLIC) <= set(NAMES)
    assert all("kafka_version" not in _config(name) for name in PUBLIC)  # they test the default, Kafka 2.x


def test_the_projects_own_scenarios_name_their_kafka_version() -> None:
    assert len(OWN) == 3
    assert sorted(_config(name)["kafka_version"] for name in OWN) == ["2.6", "3.3", "3.9.2"]


def test_the_alter_partition_scenarios_are_named_after_kafka_tests() -> None:
    assert len(ALTER_PARTITION) == 11
    tests = ("PartitionTest.test", "AlterPartitionManagerTest.test", "PartitionChangeBuilderTest.test")
    assert all(name[3:].startswith(tests) for name in ALTER_PARTITION)
    assert all(_config(name)["isr_protocol"] == "alter_partition" for name in ALTER_PARTITION)


@pytest.mark.parametrize("name", NAMES)
def test_scenario_replay_matches_expected(name: str, tmp_path: Path) -> None:
    until = (SCENARIOS / f"{name}.until").read_text().strip()
    cmd = [
        sys.executable,
        "-m",
        "isrwatch.cli",
        "replay",
        str(SCENARIOS / f"{name}.events.jsonl"),
        "--config",
        str(SCENARIOS / f"{name}.config.json"),
        "--until",
        until,
        "--out",
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for output in ("decisions", "propagations", "state", "alter_partitions"):
        expected = SCENARIOS / f"{name}.expected" / f"{output}.jsonl"
        written = tmp_path / f"{output}.jsonl"
        assert written.exists() == expected.exists(), f"{name}: {output}.jsonl written or not as expected"
        if expected.exists():
            assert _objects(written) == _objects(expected), f"{name}: {output}.jsonl differs"
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["dead_letters"] == 0
    assert summary["decisions"] == len(_objects(tmp_path / "decisions.jsonl"))
    assert (tmp_path / "dead_letter.jsonl").read_text() == ""
