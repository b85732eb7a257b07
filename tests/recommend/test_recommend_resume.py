"""recommend stopped by SIGTERM during its task sweep: the line it prints runs as printed, resumes the whole
recommendation (screen, PPL, tasks; no finished cell run again) and ends with what an uninterrupted run gives.

The oracle is the same command run through without a stop, into another folder. The plan's counts are checked
against a hand count of the grid: trained 256, target 1k, -f 4 served by llama.cpp: none, yarn:4, ntk:4, linear:4
(dynamic is not served as evaluated); a budget of 0.6 s leaves the smallest sizes, 6 documents (the fewest on which
the PPL ratio can separate) and 6 samples.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ropectl.cli.app import app
from tests.helpers.sweeps import paused_run, resume_argv, strict, terminate

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
PPL_CELLS = 4 * 6 * 3  # methods x documents x lengths (64, 256, 1k): at most this many before the task sweep


def _args(model: Path, out: Path) -> list[str]:
    return ["recommend", str(model), "-t", "1k", "-f", "4", "--serve-with", "llama.cpp", "--budget", "0.01",
            "--dtype", "fp32", "--device", "cpu", "-o", str(out), "--json"]


def _rounded(value: Any) -> Any:
    """Floats to 10 significant digits: the resumed run sums the same cells in another order."""
    if isinstance(value, float):
        return float(f"{value:.10g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines())


@pytest.mark.slow
def test_sigterm_then_the_printed_line_resumes_the_recommendation(isolated: Path, tiny_model: Path) -> None:
    whole = runner.invoke(app, _args(tiny_model, isolated / "whole"))
    assert whole.exit_code == 0, whole.output
    plan = next(ln for ln in whole.stderr.splitlines() if ln.startswith("plan:"))
    assert "a screen of 24 cells (4 methods x 6 documents at 64)" in plan  # 4 x 6
    assert "up to 72 PPL cells (4 x 6 documents x 64, 256, 1k)" in plan  # 4 x 6 x 3
    assert "up to 120 task trials (4 x 5 tasks x 6 samples at 1k)" in plan  # 4 x 5 x 6
    assert "power: 6 trials per task separate a task-score difference of 100% or more" in whole.stderr

    out = (isolated / "rec").resolve()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(isolated / "cache")}
    proc = paused_run(_args(tiny_model, out), out / "tasks" / "tasks.jsonl", env, after=PPL_CELLS + 1)
    err = terminate(proc)
    argv = resume_argv(proc, err, out, "recommend")
    assert argv[1:] == [*_args(tiny_model, out), "--resume"]  # the command as run, its --out the parent folder
    kept = _lines(out / "tasks" / "tasks.jsonl")
    assert 0 < kept < _lines(isolated / "whole" / "tasks" / "tasks.jsonl")

    resumed = runner.invoke(app, argv[1:])  # as printed
    assert resumed.exit_code == 0, resumed.output
    assert _rounded(strict(resumed.stdout)) == _rounded(strict(whole.stdout))
    for log in ("ppl/results.jsonl", "tasks/tasks.jsonl"):  # nothing measured twice, nothing missing
        assert _lines(out / log) == _lines(isolated / "whole" / log), log
