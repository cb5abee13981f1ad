"""Paths, tool runners and readers shared by the deploy tests (chart, rules, dashboards, image)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

import yaml

from isrwatch.state.records import Cause, Divergence, DivergenceKind
from isrwatch.state.step import Settled
from isrwatch.store import open_store
from tests.support.kraft import UNTIL as KRAFT_UNTIL
from tests.support.kraft import settings_args as kraft_settings
from tests.support.kraft import write_events

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "isrwatch"
GRAFANA = ROOT / "deploy" / "grafana"
RULES = ROOT / "deploy" / "prometheus" / "isrwatch.rules.yaml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "isrwatch.rules.test.yaml"
RUNBOOK_PLACEHOLDER = "https://isrwatch.example"  # the rules file's stand-in for the API's URL (docs/alerts.md)
HERE = ROOT / "tests" / "deploy"  # the deploy tests' data
SCHEMAS = HERE / "schemas"
VALUES = HERE / "values"
DEMO_EVENTS = HERE / "data" / "demo.events.jsonl"
DEMO_CONFIG = ["--set", "replica_lag_time_max_ms=10000", "--set", "min_insync_replicas=2"]
HELM = ROOT / ".tools" / "bin" / "helm"
BIN = Path(sys.executable).parent
# Sample values for the dashboards' template variables: "All" clusters, top 10, a rate window that
# spans the whole end-to-end test.
TEMPLATE_VALUES = {"$__rate_interval": "1m", "$cluster": ".*", "$topn": "10", "$broker": ".*", "$topic": ".*"}
METRIC = re.compile(r"\bisrwatch_[a-zA-Z0-9_:]+")


def run(cmd: list[str | Path], **kwargs) -> subprocess.CompletedProcess:
    """Run a tool; on failure the assertion shows its command line and output."""
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=120, **kwargs)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def wait_until(check: Callable[[], object], timeout: float, what: str, every: float = 0.2) -> object:
    """Poll `check` until it returns something truthy; fail naming `what` after `timeout` seconds.

    Other exceptions count as "not yet" (a service still starting); an AssertionError fails at once.
    """
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = check()
            if result:
                return result
        except AssertionError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported if the wait times out
            last_error = exc
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what} (last error: {last_error!r})")


@cache
def helm_template(*values_files: Path, sets: tuple[str, ...] = ()) -> tuple[dict, ...]:
    """The chart rendered with these values files, as a tuple of manifests."""
    cmd: list[str | Path] = [HELM, "template", "isrwatch", CHART, "--namespace", "kafka-monitoring"]
    for path in values_files:
        cmd += ["--values", path]
    for assignment in sets:
        cmd += ["--set", assignment]
    return tuple(doc for doc in yaml.safe_load_all(run(cmd).stdout) if doc)


def render(*args: str | Path) -> subprocess.CompletedProcess:
    """`helm template` of the chart with `args`, however it ends (the caller judges the exit status)."""
    return subprocess.run(
        [str(c) for c in (HELM, "template", "isrwatch", CHART, *args)], capture_output=True, text=True, timeout=60
    )


def assert_schema_refuses(field: str, *args: str | Path) -> None:
    """`helm template` with `args` fails at install time on the values schema, naming `field`."""
    proc = render(*args)
    assert proc.returncode != 0 and "values don't meet the specifications of the schema" in proc.stderr
    assert field in proc.stderr, proc.stderr


def dashboards() -> dict[str, dict]:
    """Every deploy/grafana dashboard by file name."""
    return {path.name: json.loads(path.read_text()) for path in sorted(GRAFANA.glob("*.json"))}


def panels(dashboard: dict) -> Iterator[dict]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", ())


def dashboard_queries(dashboard: dict) -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target, template variables replaced by sample values."""
    return [
        (f"{dashboard['uid']} / {panel['title']} / {target['refId']}", substitute(target["expr"]))
        for panel in panels(dashboard)
        for target in panel.get("targets", ())
    ]


def variable_queries(dashboard: dict) -> list[str]:
    """The Grafana `label_values(...)` queries of the query-type template variables."""
    return [var["definition"] for var in dashboard["templating"]["list"] if var["type"] == "query"]


def substitute(expr: str) -> str:
    for name, value in TEMPLATE_VALUES.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, f"unknown template variable in {expr!r}"
    return expr


def alert_rules() -> list[dict]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def commit_demo_batch(store_url: str, batch_wall_ms: int) -> None:
    """Commit one more batch of demo data, the way the streaming job would.

    The replica outputs come from real replays of the demo events and of a KRaft cluster whose leaders propose with
    AlterPartition (tests/support/kraft.py) (`isrwatch replay --store`: more batches, so every counter rises; the demo's
    last, so the watermark stays its own); the stream-health row and the late-event count, which only a live stream
    produces, go through the same Store calls the job's listener and sink make.
    """
    with tempfile.TemporaryDirectory() as tmp:
        kraft_events = write_events(Path(tmp) / "kraft.events.jsonl")
        run(
            [
                BIN / "isrwatch",
                "replay",
                kraft_events,
                *kraft_settings(),
                "--until",
                str(KRAFT_UNTIL),
                "--store",
                store_url,
            ]
        )
    run([BIN / "isrwatch", "replay", DEMO_EVENTS, *DEMO_CONFIG, "--store", store_url])
    with open_store(store_url) as store:
        batch_id = store.last_batch_id()
        store.record_progress(
            {
                "batch_id": batch_id,
                "wall_ms": batch_wall_ms,
                "watermark_ms": 40_101,
                "input_rows": 661,
                "input_rows_per_second": 220.0,
                "processed_rows_per_second": 1300.0,
                "batch_duration_ms": 510,
                "state_rows": 4,
                "late_rows": 2,
                "lost_records": [("isrwatch.events", 0, 3)],  # offsets retention deleted before the job read them
            }
        )
        # Divergences of the audit, which only agent input produces (docs/SPEC.md §7): a real one and a timing one.
        divergences = [
            Divergence(ts=40_000, cluster="default", broker=1, kind=DivergenceKind.MISSED_BY_MODEL, subject="isr"),
            Divergence(
                ts=40_000, cluster="default", broker=1, kind=DivergenceKind.TIMING, cause=Cause.MARGIN, subject="isr"
            ),
        ]
        store.write_batch(batch_id + 1, Settled(divergences=divergences, counters=Counter(late_events=2)))
