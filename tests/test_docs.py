"""The README a newcomer reads and the docs it links: short, every command with its help text, every room and core
module in the layout and every core module's contract in docs/CONTRACTS.md, every alert with its runbook anchor, and
no link to a file or heading that is not there."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

from isrwatch.cli import COMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CONTRACTS = ROOT / "docs" / "CONTRACTS.md"
CORE_MODULES = sorted(m.stem for m in (ROOT / "state").glob("*.py") if m.stem != "__init__")
DOCS = sorted((ROOT / "docs").rglob("*.md"))
RULES = ROOT / "deploy" / "prometheus" / "isrwatch.rules.yaml"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _section(text: str, heading: str) -> str:
    """The text under `## heading`, up to the next `## `."""
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings: lower case, punctuation dropped, spaces as hyphens."""
    headings = re.findall(r"^#+ (.+)$", path.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_the_readme_is_read_in_five_minutes() -> None:
    text = README.read_text()
    assert len(text.splitlines()) < 250
    first_screen = text.split("\n## ", 1)[0] + _section(text, "The two commands")
    for said in ("docs/img/status-page.png", "make demo ", "make test ", "make demo-real", "stuck", "slow"):
        assert said in first_screen, said
    assert (ROOT / "docs" / "img" / "status-page.png").is_file()


def test_every_command_has_its_help_text_and_a_section() -> None:
    text = README.read_text()
    usage = _section(text, "Usage")
    helps = {
        action.dest: action.help for sub in build_parser()._subparsers._group_actions for action in sub._choices_actions
    }
    assert len(helps) == len(COMMANDS)
    for name, help_text in helps.items():
        row = f"| `isrwatch {name}` | {help_text.replace('|', chr(92) + '|')} |"
        assert row in usage, f"README's usage table has no row {row}"
        assert f"\n### `isrwatch {name}`\n" in usage, name


def test_the_layout_lists_every_room_and_core_module() -> None:
    layout = _section(README.read_text(), "Layout")
    package_dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    rooms = [*package_dirs.values(), "agent", "tests"]
    assert {"state", "store", "streaming", "api", "sim", "lab", "cli", "bench"} <= set(rooms)
    for room in rooms:
        assert f"| `{room}/`" in layout, room
    for module in CORE_MODULES:
        assert f"`{module}`" in layout, f"core module {module} missing from README's layout"


def test_the_contracts_name_every_core_module_and_no_other() -> None:
    """CONTRACTS.md's core section states each `state/` module's contract, as its metrics section is the catalogue:
    a module added without its contract, or a contract left behind by a module removed, fails here."""
    core = _section(CONTRACTS.read_text(), "Core (state/, pure)")
    named = set(re.findall(r"`isrwatch\.state\.(\w+)", core))
    assert CORE_MODULES, "no core modules found"
    assert not set(CORE_MODULES) - named, f"docs/CONTRACTS.md's core section omits {sorted(set(CORE_MODULES) - named)}"
    assert not named - set(CORE_MODULES), (
        f"docs/CONTRACTS.md names core modules that are not there: {named - set(CORE_MODULES)}"
    )


def test_every_alert_has_its_runbook_anchor_and_a_readme_row() -> None:
    alerts = [rule["alert"] for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]
    assert len(alerts) >= 13
    anchors = _anchors(ROOT / "docs" / "alerts.md")
    section = _section(README.read_text(), "Alerts")
    for alert in alerts:
        assert alert.lower() in anchors, f"docs/alerts.md has no heading for {alert}"
        assert f"[{alert}](docs/alerts.md#{alert.lower()})" in section, alert


def test_every_local_link_leads_somewhere() -> None:
    for page in (README, *DOCS):
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            assert file.exists(), f"{page.relative_to(ROOT)} links {target}: no such file"
            if anchor and file.suffix == ".md":
                assert anchor in _anchors(file), f"{page.relative_to(ROOT)} links {target}: no such heading"
