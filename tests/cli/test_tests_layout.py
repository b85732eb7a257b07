"""The tests' own layout: no module under tests/ imports a test module (shared code lives in tests/helpers/, shared
fixtures in conftest.py files), and tests/conftest.py leaves sys.path alone (pyproject's pytest ``pythonpath``
puts the repository root there, so helpers import as ``tests.helpers.<module>``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]


def imported_test_modules(source: str) -> list[str]:
    """Every import in ``source`` that names a ``test_*`` module (absolute or relative)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            prefix = "." * node.level
            if node.module:
                names = [prefix + node.module, *(f"{prefix}{node.module}.{a.name}" for a in node.names)]
            else:
                names = [prefix + a.name for a in node.names]
        else:
            continue
        found += [n for n in names if any(part.startswith("test_") for part in n.split("."))]
    return found


def touches_sys_path(source: str) -> bool:
    return any(isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name)
               and node.value.id == "sys" for node in ast.walk(ast.parse(source)))


def test_no_module_under_tests_imports_a_test_module() -> None:
    bad = [f"{path.relative_to(TESTS)}: {name}" for path in sorted(TESTS.rglob("*.py"))
           for name in imported_test_modules(path.read_text(encoding="utf-8"))]
    assert not bad, bad


def test_the_root_conftest_leaves_sys_path_alone() -> None:
    assert not touches_sys_path((TESTS / "conftest.py").read_text(encoding="utf-8"))


@pytest.mark.parametrize(("source", "found"), [
    ("import test_ppl_fixtures as fx", ["test_ppl_fixtures"]),
    ("from test_bad_inputs import one_line", ["test_bad_inputs", "test_bad_inputs.one_line"]),
    ("def f():\n    from tests.eval.test_ppl_run import doc_tokens", ["tests.eval.test_ppl_run",
                                                                    "tests.eval.test_ppl_run.doc_tokens"]),
    ("from . import test_patch", [".test_patch"]),
    ("from tests.helpers.eval_reference import doc_tokens", []),  # control: a helper module
    ("import pytest\nfrom ropectl.cli.app import app", []),  # control
])
def test_the_import_check_sees_test_modules(source: str, found: list[str]) -> None:
    assert imported_test_modules(source) == found


@pytest.mark.parametrize(("source", "touches"), [
    ("import sys\nsys.path.insert(0, 'tests')", True),
    ("import sys\nfrom pathlib import Path\nsys.path.append(str(Path(__file__).parent))", True),
    ("import os\nos.environ.setdefault('HF_HUB_OFFLINE', '1')", False),  # control
])
def test_the_sys_path_check_sees_manipulation(source: str, touches: bool) -> None:
    assert touches_sys_path(source) is touches
