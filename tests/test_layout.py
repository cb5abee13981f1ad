"""The suite's own layout (tests/README.md): shared helpers live in tests/support/ only, and no test module
imports another test module, so a test file can move, split or go without breaking another."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
SUPPORT = TESTS / "support"


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    return found | {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}


def test_every_python_file_under_tests_is_a_test_module_a_conftest_or_a_support_module() -> None:
    stray = [
        str(p.relative_to(TESTS))
        for p in TESTS.rglob("*.py")
        if not (p.name.startswith("test_") or p.name == "conftest.py" or p.is_relative_to(SUPPORT))
    ]
    assert stray == [], f"shared helpers belong in tests/support/: {stray}"


def test_no_module_of_the_suite_imports_a_test_module() -> None:
    imports = {
        str(p.relative_to(TESTS)): sorted(m for m in _imported_modules(p) if m.rsplit(".", 1)[-1].startswith("test_"))
        for p in TESTS.rglob("*.py")
    }
    assert {path: mods for path, mods in imports.items() if mods} == {}
