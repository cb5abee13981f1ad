"""The public scenarios (tests/scenarios) replayed through `isrwatch replay` as a user runs it: with the
scenario's config, up to its `.until`."""

from __future__ import annotations

from pathlib import Path

from isrwatch.cli import main as isrwatch

SCENARIOS = Path(__file__).parents[1] / "scenarios"


def replay_scenario(name: str, *args: str) -> int:
    """`isrwatch replay` of scenario `name` plus `args` (e.g. `--store URL`); its exit status."""
    base = SCENARIOS / name
    until = (SCENARIOS / f"{name}.until").read_text().strip()
    return isrwatch(["replay", f"{base}.events.jsonl", "--config", f"{base}.config.json", "--until", until, *args])
