"""Prometheus alert rules (deploy/prometheus): promtool checks them and runs their unit tests."""

from __future__ import annotations

import yaml

from tests.support.deploy import RULE_TESTS, RULES, RUNBOOK_PLACEHOLDER, alert_rules, run


def test_promtool_check_rules() -> None:
    proc = run(["promtool", "check", "rules", RULES])
    assert f"SUCCESS: {len(alert_rules())} rules found" in proc.stdout + proc.stderr


def test_promtool_rule_unit_tests_pass() -> None:
    proc = run(["promtool", "test", "rules", RULE_TESTS.name], cwd=RULE_TESTS.parent)
    assert "SUCCESS" in proc.stdout + proc.stderr


def test_every_alert_has_a_unit_test_that_fires_it() -> None:
    fired = {
        case["alertname"]
        for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in test.get("alert_rule_test", ())
        if case.get("exp_alerts")
    }
    assert fired == {rule["alert"] for rule in alert_rules()}


def test_alerts_have_a_severity_and_a_summary() -> None:
    for rule in alert_rules():
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]


def test_every_alert_links_its_runbook() -> None:
    """Each alert's `runbook_url` is its section of the runbook the API serves (docs/alerts.md at /runbooks, the
    anchor GitHub gives a heading named after the alert), absolute, under the documented placeholder for the API's
    URL, so a page or a notification leads to what it means and what to do (tests/api/test_runbooks.py follows
    them on a real server)."""
    for rule in alert_rules():
        assert rule["annotations"]["runbook_url"] == f"{RUNBOOK_PLACEHOLDER}/runbooks#{rule['alert'].lower()}"
