"""A shared option out of range is refused in the same words by every command that takes it (one checker each, in
ropectl/limits.py), before any model is loaded or anything written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.cli import one_line
from tests.helpers.report_engine import tiny_base

BAD = {
    "--budget": ("0", "--budget must be a positive number of minutes, got 0"),
    "--max-regression": ("-1", "--max-regression must be 0 or more, got -1"),
}


def commands(model: str, out: Path) -> dict[str, list[str]]:
    return {"recommend": ["recommend", model, "-t", "4k", "-o", str(out)],
            "report": ["report", model, model, "-t", "4k", "-o", str(out)],
            "extend": ["extend", model, "-t", "4k", "-o", str(out)],
            "search": ["search", model, "-t", "4k", "-o", str(out)]}


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tiny_base(tmp_path_factory.mktemp("ranges") / "base", 2048))


@pytest.mark.parametrize("flag", sorted(BAD))
@pytest.mark.parametrize("command", ["recommend", "report", "extend", "search"])
def test_the_same_refusal_in_every_command(model: str, tmp_path: Path, command: str, flag: str) -> None:
    value, words = BAD[flag]
    out = tmp_path / "out"
    line = one_line([*commands(model, out)[command], flag, value], words)
    assert line.count("\n") == 0
    assert not out.exists()


def test_a_value_in_range_is_not_refused_by_the_checkers() -> None:
    """Negative control: the checkers pass the edges they allow."""
    from ropectl.limits import check_budget, check_max_regression, check_paired_docs

    check_budget(None), check_budget(0.01), check_max_regression(0.0), check_paired_docs(2), check_paired_docs(None)
    with pytest.raises(Exception, match="positive number of minutes"):
        check_budget(float("nan"))
