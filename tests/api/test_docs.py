"""/docs and /redoc work offline: their pages reference only the API's own files, which it serves, and a real
chromium that may reach nothing but the API renders every operation in both."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import httpx

from tests.support.net import PLAYWRIGHT_CORE, serving

SCRIPT = Path(__file__).with_name("docs_offline.cjs")


def test_the_docs_pages_reference_only_files_the_api_serves(scenario_url: str) -> None:
    with serving(scenario_url) as base:
        for page in ("/docs", "/redoc"):
            html = httpx.get(base + page, timeout=10).text
            assets = re.findall(r"""(?:src|href|url)\s*[=:]\s*['"]([^'"]+)['"]""", html)
            assert assets, html
            for asset in assets:
                assert asset.startswith("/"), f"{page} loads {asset} from elsewhere"
                r = httpx.get(base + asset, timeout=10)
                assert r.status_code == 200 and r.content, (page, asset, r.status_code)


def test_a_browser_offline_renders_every_operation_in_swagger_ui_and_redoc(scenario_url: str) -> None:
    with serving(scenario_url) as base:
        operations = httpx.get(base + "/openapi.json", timeout=10).json()["paths"]
        done = subprocess.run(
            ["node", str(SCRIPT), base],
            env={**os.environ, "PLAYWRIGHT_CORE": str(PLAYWRIGHT_CORE)},
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["failed"] == [] and seen["refused"] == [], seen  # nothing left the API's origin
    # What the pages' bundles would fetch from elsewhere (ReDoc's footer logo) the browser was told not to.
    assert all(not url.startswith(base) for url in seen["blocked"]), seen["blocked"]
    assert {path.replace("\u200b", "") for path in seen["swagger"]} == set(operations)
    assert len(seen["redoc"]) == len(operations)
