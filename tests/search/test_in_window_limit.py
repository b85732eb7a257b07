"""--max-regression in search has recommend's reference: the unpatched model's in-window PPL, not the best closed
form's. The expected limits are computed by hand from the PPLs below."""

from __future__ import annotations

import math

import pytest

from ropectl.search.fitness import Measured, Plan
from ropectl.search.run import in_window_limit


def _at(spec: str, ppl_inside: float) -> Measured:
    # one document of 100 tokens at the trained length (256): log PPL = NLL / tokens
    return Measured(spec, True, {256: [100 * math.log(ppl_inside)]}, {256: [100]})


def test_the_limit_is_none_plus_the_allowed_regression() -> None:
    # yarn reads better than none inside the window here, so the old rule (best closed form + 5 %) would give 9.45
    reference = {"none": _at("none", 10.0), "yarn:2": _at("yarn:2", 9.0), "linear:2": _at("linear:2", 14.0)}
    limit = in_window_limit(reference, Plan(256, 512, (512,)), 0.05)
    assert math.exp(limit) == pytest.approx(10.5, rel=1e-12)
    assert math.exp(limit) != pytest.approx(9.45, rel=1e-6)  # control: not the best closed form's


def test_no_regression_allowed_is_none_itself() -> None:
    assert math.exp(in_window_limit({"none": _at("none", 7.0)}, Plan(256, 512, (512,)), 0.0)) == pytest.approx(7.0)
