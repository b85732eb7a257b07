"""verify's verdict against hand-computed |ΔNLL| (``ropectl.verify.compare``, ``run.judge``): band means and maxima,
the tolerance (dtype allowance plus a measured floor and its margin), and a difference 5x past it flagged where
it is, while one within stays "same"."""

from __future__ import annotations

import math

import pytest

from ropectl.verify import compare
from ropectl.verify.plan import Plan
from ropectl.verify.run import judge

PLAN = Plan(engines=("transformers", "x"), trained=4, target=8, lengths=(4, 8), dtype="fp32", device="cpu")
REF = {"serve_line": "", "skipped": {}, "floor": None,
       "nll": {4: [[1.0, 2.0, 3.0], [1.5, 2.5, 3.5]], 8: [[1.0] * 7, [2.0] * 7]}}


def answer(shift_in: float, shift_out: float, floor: list[list[float]] | None = None) -> dict:
    """The reference's NLL moved by ``shift_in`` at target positions <= 4 and ``shift_out`` past it."""
    nll = {n: [[v + (shift_in if k + 2 <= 4 else shift_out) for k, v in enumerate(doc)] for doc in docs]
           for n, docs in REF["nll"].items()}
    return {"serve_line": "line", "skipped": {}, "nll": nll, "floor": floor}


def test_bands_are_the_positions_between_the_lengths() -> None:
    assert compare.band_edges([8, 4, 4]) == [(0, 4), (4, 8)]
    per = {8: compare.deltas(answer(1e-3, 2e-3)["nll"][8], REF["nll"][8])}
    inside, outside = compare.bands(per, [4, 8])
    assert (inside.tokens, outside.tokens) == (6, 8)  # targets 2-4 and 5-8 of two documents
    assert inside.mean == pytest.approx(1e-3) and outside.max == pytest.approx(2e-3)


def test_within_the_tolerance_it_is_the_same() -> None:
    row = judge("x", answer(3e-5, 5e-5), REF, PLAN)
    assert row.verdict == "same" and row.tolerance == compare.TOLERANCE["fp32"]
    assert row.mean_abs_dnll == pytest.approx(5e-5) and row.max_abs_dnll == pytest.approx(5e-5)
    # per document: targets 2-4 moved by 3e-5, targets 5-8 by 5e-5
    assert row.ppl[8] == pytest.approx(math.exp((7 * 1.0 + 7 * 2.0 + 6 * 3e-5 + 8 * 5e-5) / 14), rel=1e-12)


def test_a_difference_past_it_differs_and_says_where() -> None:
    row = judge("x", answer(0.0, 5e-4), REF, PLAN)
    assert row.verdict == "differs" and row.mean_abs_dnll == pytest.approx(5e-4)
    assert "positions 5-8 of the 8-token forward" in row.why and "5x the tolerance" in row.why


def test_a_measured_floor_widens_the_tolerance_by_itself_and_its_margin() -> None:
    floor = [[v + 0.01 for v in doc] for doc in REF["nll"][4]]  # the file's own error inside the window: 0.01
    plan = Plan(**{**PLAN.__dict__})
    ref = {**REF, "floor": REF["nll"][4]}
    row = judge("x", answer(0.01, 0.012, floor), ref, plan)
    assert row.floor == pytest.approx(0.01)
    assert row.tolerance == pytest.approx(1e-4 + 0.01 * (1 + compare.FLOOR_MARGIN))
    assert row.verdict == "same"
    assert judge("x", answer(0.01, 0.08, floor), ref, plan).verdict == "differs"  # 5x past the floor's tolerance
