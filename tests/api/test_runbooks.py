"""The alerts' runbook on the API (`GET /runbooks`): every alert's runbook_url, with a real server's URL in place of
the rules file's placeholder, opens a page holding that alert's section at its anchor."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import httpx

from tests.support.deploy import RUNBOOK_PLACEHOLDER, alert_rules
from tests.support.net import serving_command

ALERTS_MD = Path(__file__).resolve().parents[2] / "docs" / "alerts.md"


HEADING = re.compile(r'<h[1-6] id="([^"]+)">(.*?)</h[1-6]>')


def test_every_runbook_url_opens_its_alerts_section(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'isrwatch.db'}"
    serve = [sys.executable, "-m", "isrwatch.cli", "serve", "--store", store, "--port", "0"]
    with serving_command(serve, env={**os.environ, "ISRWATCH_API_TOKEN": "secret"}) as (base, _):
        pages = {}
        for rule in alert_rules():
            url = rule["annotations"]["runbook_url"].replace(RUNBOOK_PLACEHOLDER, base, 1)
            page, _, fragment = url.partition("#")
            if page not in pages:
                r = httpx.get(page, timeout=10)  # no token: a notification's reader opens it as it is
                assert r.status_code == 200 and r.headers["content-type"].startswith("text/html"), r.text
                pages[page] = r.text
            assert fragment == rule["alert"].lower()
            assert dict(HEADING.findall(pages[page])).get(fragment) == rule["alert"], fragment  # its own heading
        assert list(pages) == [f"{base}/runbooks"]
    # The page says what docs/alerts.md says: each heading and paragraph, inline code and in-page links kept.
    html = pages[f"{base}/runbooks"]
    assert '<h3 id="isrwatchunderminisrpartitions">IsrwatchUnderMinIsrPartitions</h3>' in html
    assert '<a href="#isrwatchunderreplicatedpartitions">under-replicated partitions</a>' in html
    assert "<code>NOT_ENOUGH_REPLICAS</code>" in html
    headings = re.findall(r"^#+ (.+)$", ALERTS_MD.read_text(), re.M)
    assert len(HEADING.findall(html)) == len(headings)
