"""The metric catalogue is the one list of what /metrics exports: docs/CONTRACTS.md names exactly it."""

from __future__ import annotations

import re
from pathlib import Path

from isrwatch.state.metrics import CATALOGUE, TALLIED, Kind

CONTRACTS = Path(__file__).parents[2] / "docs" / "CONTRACTS.md"


def _documented() -> dict[str, str]:
    """Metric name -> its label list as written in the Metrics section of CONTRACTS.md."""
    section = CONTRACTS.read_text().split("## Metrics", 1)[1]
    return {m.group(1): m.group(2) or "" for m in re.finditer(r"`(isrwatch_[a-z_]+)(?:\{([a-z_,]+)\})?`", section)}


def test_contracts_md_names_every_exported_metric_and_no_other() -> None:
    assert set(_documented()) == {m.exposed for m in CATALOGUE}


def test_contracts_md_gives_each_metric_its_labels() -> None:
    documented = _documented()
    for m in CATALOGUE:
        labels = set(filter(None, documented[m.exposed].split(",")))
        assert labels == set(m.labels) - {"le"}, m.exposed


def test_every_counter_and_histogram_reads_a_tally_and_gauges_none() -> None:
    for m in CATALOGUE:
        assert bool(m.tally) == (m.kind is not Kind.GAUGE), m.name
        assert bool(m.buckets) == (m.kind is Kind.HISTOGRAM), m.name
    assert len(TALLIED) == sum(m.kind is not Kind.GAUGE for m in CATALOGUE)
    assert len({m.name for m in CATALOGUE}) == len(CATALOGUE)
