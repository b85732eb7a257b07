"""transformers compat tier: every tested version, every architecture, method and schema, run for real.

Each cell checks two things against the cos/sin a real forward pass used (tests/compat/runner.py in that
version's venv): the reader module predicted exactly what the version computed, and the version
computed ropectl's own RoPE, or ``patch`` warned naming that version's range.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from cases import Case, build, names  # noqa: E402
from tier import cell, run_version, versions  # noqa: E402

_RESULTS: dict[str, dict[str, Any] | None] = {}


@pytest.fixture(scope="session")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Case]:
    return {c.name: c for c in build(tmp_path_factory.mktemp("compat"))}


@pytest.mark.parametrize("name", names())
@pytest.mark.parametrize("version", versions())
def test_cell(version: str, name: str, cases: dict[str, Case], tmp_path_factory: pytest.TempPathFactory) -> None:
    if version not in _RESULTS:
        _RESULTS[version] = run_version(version, cases, tmp_path_factory.mktemp("jobs"))
    measured = _RESULTS[version]
    if measured is None:
        pytest.skip(f"no venv for transformers {version}: run tests/compat/tf_venvs.sh (make compat does)")
    case = cases[name]
    code, why = cell(version, case, measured.get(str(case.folder)))
    if code == "R":
        pytest.skip(f"refused by ropectl: {why}")
    assert code != "X", f"the reader module mispredicts transformers {version}: {why}"
    assert code != "U", f"transformers {version} differs from ropectl ({why}) and patch did not warn: {case.warnings}"
