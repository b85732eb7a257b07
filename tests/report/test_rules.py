"""report's rules against oracles computed apart from the code: Wilson bounds from the quadratic's roots, the MOVER-R
ratio's closed forms at perfect scores, and the interval rule on hand-made intervals."""

from __future__ import annotations

import math

import pytest

from ropectl.eval.effective import COUNTS, FAILS, UNDECIDED, Point, effective_length, samples_to_decide
from ropectl.eval.stats import MeanInterval, ratio_interval, wilson_interval
from ropectl.report.plan import Plan, best_ratio_lower, fewest_to_count, fit_budget
from ropectl.report.spec import default_lengths, reference_length

Z = 1.959963984540054  # the normal's 97.5 % quantile


def wilson_by_roots(x: int, n: int) -> tuple[float, float]:
    """The Wilson interval as the two roots of (x/n - p)^2 = z^2 p (1 - p) / n (not the centre +- half form)."""
    ph = x / n
    a, b, c = 1 + Z * Z / n, -(2 * ph + Z * Z / n), ph * ph
    d = math.sqrt(b * b - 4 * a * c)
    return (-b - d) / (2 * a), (-b + d) / (2 * a)


def interval(x: int, n: int) -> MeanInterval:
    lo, hi = wilson_interval(x, n)
    return MeanInterval(n, x / n, lo, hi)


def test_wilson_matches_the_roots_and_the_issue_2_of_2() -> None:
    assert wilson_interval(2, 2)[0] == pytest.approx(0.342380227506653, abs=1e-12)  # the issue's [34 %, 100 %]
    for x, n in ((8, 10), (9, 10), (1, 7), (29, 30)):
        assert wilson_interval(x, n) == pytest.approx(wilson_by_roots(x, n), abs=1e-12)


def test_ratio_at_perfect_scores_has_closed_forms() -> None:
    """pa = pb = 1: L = la = n / (n + z^2) and U = 1 / lb, by hand from the MOVER-R formula."""
    ratio, lo, hi = ratio_interval(interval(30, 30), interval(10, 10))
    assert ratio == 1.0
    assert lo == pytest.approx(30 / (30 + Z * Z), abs=1e-12) == pytest.approx(0.886486606826031, abs=1e-12)
    assert hi == pytest.approx((10 + Z * Z) / 10, abs=1e-12)


def test_ratio_of_two_proportions() -> None:
    """8/10 over 9/10: the MOVER-R ends, computed apart (mpmath, 30 digits, roots-form Wilson)."""
    ratio, lo, hi = ratio_interval(interval(8, 10), interval(9, 10))
    assert ratio == pytest.approx(8 / 9)
    assert lo == pytest.approx(0.541102283087743, abs=1e-9)
    assert hi == pytest.approx(1.382484567433136, abs=1e-9)


def test_ratio_of_a_zero_score_is_never_zero_width() -> None:
    ratio, lo, hi = ratio_interval(interval(0, 5), interval(5, 5))
    assert ratio == 0 and lo == 0 and hi > 0.4  # Katz's log ratio has no interval here


def test_interval_rule() -> None:
    pts = [Point(length=n, lo=lo, hi=hi) for n, lo, hi in ((2, 0.9, 1.1), (3, 0.86, 1.0), (4, 0.5, 0.84))]
    e = effective_length(pts, 0.85)
    assert (e.length, e.determined, e.stopped_at) == (3, True, 4)
    assert [s for _, s in e.statuses] == [COUNTS, COUNTS, FAILS]
    e = effective_length([*pts[:2], Point(length=4, lo=0.8, hi=0.9)], 0.85)
    assert (e.length, e.determined, e.status(4)) == (3, False, UNDECIDED)
    assert effective_length(pts[:2], 0.85).length == 3 and effective_length(pts[:2], 0.85).stopped_at is None
    assert effective_length([Point(length=2, lo=0.1, hi=0.2)], 0.85).length is None


def test_samples_to_decide_a_perfect_score() -> None:
    """Every trial right: the ratio's lower bound is k / (k + z^2) >= 0.85 from k >= 0.85 z^2 / 0.15 = 21.77."""
    assert fewest_to_count(10) == 22
    assert best_ratio_lower(21, 21) < 0.85 <= best_ratio_lower(22, 22)
    assert samples_to_decide(lambda k: wilson_interval(k, k), 0.85, 2) == 22


def test_lengths_and_reference() -> None:
    assert default_lengths(2048, 6144) == (2048, 3072, 4096, 6144)
    assert default_lengths(8192, 131072) == (8192, 12288, 16384, 32768, 65536, 131072)  # RULER's doubling grid
    assert default_lengths(8192, 40960) == (8192, 12288, 16384, 32768, 40960)
    assert default_lengths(8192, 12288) == (8192, 12288)
    assert default_lengths(8192, 10240) == (8192, 10240)
    assert reference_length(8192) == 2048


def test_budget_sizes_the_samples() -> None:
    from ropectl.eval.timing import Shape, Timing

    timing = Timing(seconds=1.0, tokens=1000, short_s=0.064, short=64, shape=Shape(params=1, attention=0))
    plan = Plan(tasks=("a",), reference=100, lengths=(1000,), samples=40, docs=2, ppl_lengths=(100, 1000))
    # a forward of n tokens costs n / 1000 s here: 2 models x 10 reference trials at 100, the extended model's k
    # trials at 1000 (the base runs at the reference only), 2 x 2 documents at 1000
    fitted = fit_budget(plan, timing, 2 * 10 * 0.1 + 7 * 1.0 + 2 * 2 * 1.0 + 1e-6)
    assert fitted is not None and fitted.samples == 7
    assert fit_budget(plan, timing, 1.0) is None
