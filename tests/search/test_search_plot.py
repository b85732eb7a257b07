"""The search's figures (ropectl.search.plot): PNGs written, the best-so-far line, unwritable targets."""

from __future__ import annotations

from pathlib import Path

import pytest

from ropectl.errors import OutputError
from ropectl.search.plot import best_so_far, plot_factors, plot_trials

TRIALS = [
    {"number": 0, "params": {}, "fitness": None, "state": "infeasible", "lengths": [512], "seconds": 1.0},
    {"number": 1, "params": {}, "fitness": 9.0, "state": "complete", "lengths": [512], "seconds": 1.0},
    {"number": 2, "params": {}, "fitness": None, "state": "pruned", "lengths": [512], "seconds": 0.5},
    {"number": 3, "params": {}, "fitness": 7.5, "state": "complete", "lengths": [512, 1024], "seconds": 2.0},
    {"number": 4, "params": {}, "fitness": 8.0, "state": "complete", "lengths": [512, 1024], "seconds": 2.0},
]
PNG = b"\x89PNG\r\n\x1a\n"


def test_best_so_far_by_hand() -> None:
    assert best_so_far(TRIALS) == [None, 9.0, 9.0, 7.5, 7.5]
    assert best_so_far([]) == []


def test_plots_are_pngs(tmp_path: Path) -> None:
    plot_trials(TRIALS, tmp_path / "trials.png")
    plot_trials(TRIALS[:1], tmp_path / "none.png")  # nothing complete yet: still a figure
    plot_factors([1.0, 1.2, 1.9, 2.0], {"yarn:2": [1.0, 1.0, 2.0, 2.0], "linear:2": [2.0] * 4}, tmp_path / "f.png")
    for name in ("trials.png", "none.png", "f.png"):
        data = (tmp_path / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 5000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.png", "none.png", "trials.png"]  # no temp files left


def test_unwritable_target_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="cannot write plot"):
        plot_trials(TRIALS, tmp_path / "missing" / "trials.png")
