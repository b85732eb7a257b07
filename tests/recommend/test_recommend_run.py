"""recommend's own sweeps end to end on SmolLM2: the screen, the PPL pass resuming its folder, the task sweep.

The sizes are GENERIC's shape made small (linear:8 and yarn:8, screened at 256 tokens, target 1k, 2 documents,
2 trials of one task). Whether a method is screened is checked against the PPL cells the run wrote, recomputed
by hand (exp of the token-weighted mean NLL), not against the screen's own arithmetic.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ropectl.eval.tasks.ppl.results import read_cells
from ropectl.recommend import run as recommend_run

SIZES = {"candidates": ("linear", "yarn"), "grid": (1.0,), "inside": ["256"], "docs": 2, "tasks": "niah_single_1",
         "samples": 2, "task_at": None}
METHODS = ["none", "linear:8", "yarn:8"]


def _ppl(cells, method: str, length: int) -> float:
    found = [c for c in cells if c.method == method and c.length == length]
    return math.exp(sum(c.nll_sum for c in found) / sum(c.tokens for c in found))


@pytest.mark.slow
def test_screen_then_sweeps(smollm2: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A screened method keeps its 256-token cell only; `none` (never screened: the control) has every length."""
    limit = 0.05
    monkeypatch.setattr(recommend_run, "GENERIC", SIZES)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = recommend_run.run_sweeps(str(smollm2), 1024, 8.0, tmp_path / "rec", "fp32", "cpu", max_regression=limit)
    cells = read_cells(tmp_path / "rec" / "ppl", out.ppl.meta["run"]).cells
    assert out.ppl.meta["methods"] == METHODS
    screened = out.ppl.meta["screened_out"]
    for method in METHODS[1:]:
        regression = _ppl(cells, method, 256) / _ppl(cells, "none", 256) - 1
        assert (method in screened) == (regression > limit), (method, regression)
        assert {c.length for c in cells if c.method == method} == ({256} if method in screened else {256, 1024})
    assert "linear:8" in screened  # 8x compressed positions at 256 tokens: far worse than none
    assert {c.length for c in cells if c.method == "none"} == {256, 1024}
    task_methods = {r.method for r in out.tasks.rows}
    assert task_methods == {e.method for e in out.recommendation.evidence if e.eligible}
    assert not task_methods & set(screened)
    listed = {e.method: e for e in out.recommendation.evidence}
    assert set(listed) == set(METHODS) and all(listed[m].ppl_target is None for m in screened)
