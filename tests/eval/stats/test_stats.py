"""ropectl.eval.stats (t, exact tests, sample sizes) against independent values: published tables, closed forms and
hand arithmetic. The intervals: tests/eval/stats/test_intervals.py."""

from __future__ import annotations

import math

import pytest

from ropectl.eval.distributions import reg_inc_beta, t_quantile, t_sf
from ropectl.eval.stats import (
    mcnemar_exact,
    min_pairs,
    samples_to_separate,
    trials_to_separate_binary,
)

# Two-sided 95% / power 80% normal quantiles from the standard table.
Z975, Z80 = 1.959964, 0.841621


@pytest.mark.parametrize(
    ("p", "df", "expected"),
    [
        (0.975, 1, 12.706205),
        (0.975, 2, 4.302653),
        (0.975, 3, 3.182446),
        (0.975, 4, 2.776445),
        (0.975, 9, 2.262157),
        (0.975, 19, 2.093024),
        (0.995, 30, 2.749996),
        (0.95, 10, 1.812461),
        (0.9, 60, 1.295821),
    ],
)
def test_t_quantile_matches_published_table(p, df, expected):
    assert t_quantile(p, df) == pytest.approx(expected, abs=1e-6)
    assert t_quantile(1 - p, df) == pytest.approx(-expected, abs=1e-6)


def test_t_quantile_closed_forms_and_limits():
    # df = 1 is Cauchy: quantile tan(pi (p - 1/2)); far tails stress the bracketing.
    for p in (0.6, 0.9, 0.999, 0.9999):
        assert t_quantile(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-9)
    assert t_quantile(0.5, 7) == 0.0
    assert t_quantile(0.975, 1e6) == pytest.approx(Z975, abs=1e-5)  # t -> normal
    with pytest.raises(ValueError):
        t_quantile(1.0, 3)
    with pytest.raises(ValueError):
        t_quantile(0.9, 0)


@pytest.mark.parametrize("t", [-3.0, -0.4, 0.0, 0.7, 2.5, 40.0])
def test_t_sf_closed_forms(t):
    # Closed-form CDFs: df 1 (Cauchy), df 2, df 4 (textbook forms, not the incomplete beta).
    assert t_sf(t, 1) == pytest.approx(0.5 - math.atan(t) / math.pi, abs=1e-12)
    assert t_sf(t, 2) == pytest.approx(0.5 - t / (2 * math.sqrt(2 + t * t)), abs=1e-12)
    x = t / math.sqrt(1 + t * t / 4)
    cdf4 = 0.5 + 3 / 8 * x * (1 - t * t / (12 * (1 + t * t / 4)))
    assert t_sf(t, 4) == pytest.approx(1 - cdf4, abs=1e-12)


def test_reg_inc_beta_closed_forms():
    for x in (0.0, 0.1, 0.5, 0.93, 1.0):
        assert reg_inc_beta(x, 1, 1) == pytest.approx(x, abs=1e-14)
        assert reg_inc_beta(x, 3.5, 1) == pytest.approx(x**3.5, abs=1e-14)
        assert reg_inc_beta(x, 1, 2) == pytest.approx(1 - (1 - x) ** 2, abs=1e-14)
    assert reg_inc_beta(0.5, 40, 40) == pytest.approx(0.5, abs=1e-13)


def test_mcnemar_exact_hand_values():
    assert mcnemar_exact(6, 0) == pytest.approx(0.03125)  # 2 * (1/2)^6
    assert mcnemar_exact(5, 1) == pytest.approx(0.21875)  # 2 * (1 + 6) / 64
    assert mcnemar_exact(1, 5) == mcnemar_exact(5, 1)
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(3, 3) == 1.0  # 2 * 42/64 clipped
    assert mcnemar_exact(2000, 0) < 1e-300  # exact integers: no overflow or error for long runs


def test_min_pairs_is_where_the_exact_sign_test_can_first_reject():
    # 2 * 0.5^k < alpha: 95 % -> 6 (5 all one way give 0.0625), 99 % -> 8 (7 give 0.0156).
    assert min_pairs(0.95) == 6 and mcnemar_exact(5, 0) > 0.05 and mcnemar_exact(6, 0) < 0.05
    assert min_pairs(0.99) == 8 and mcnemar_exact(7, 0) > 0.01 and mcnemar_exact(8, 0) < 0.01


def test_samples_to_separate_hand_computed():
    # Student-t table values (two-sided 95 %, power 80 %): the smallest n with n >= ((t_.975 + t_.80) * sd / diff)^2.
    # sd/diff = 0.18: n = 2 (1 df): (12.706 + 1.376)^2 * 0.0324 = 6.42 > 2; n = 3 (2 df): (4.303 + 1.061)^2 * 0.0324
    # = 0.93 <= 3. The normal approximation said 2, the n of a run that had just failed to separate.
    assert samples_to_separate(1.0, 0.18) == 3
    # sd/diff = 1: n = 9 (8 df): (2.306 + 0.889)^2 = 10.21 > 9; n = 10 (9 df): (2.262 + 0.883)^2 = 9.89 <= 10.
    assert samples_to_separate(1.0, 1.0) == 10
    assert samples_to_separate(-1.0, 1.0) == 10
    # Large n: at least the normal approximation's ceil(((1.959964 + 0.841621) * 5)^2) = ceil(196.22) = 197, and
    # within a few pairs of it (t_.975 + t_.80 at 196 df is about 2.8156: 2.8156^2 * 25 = 198.2 -> 199).
    assert samples_to_separate(0.1, 0.5) == 199
    assert 421 <= samples_to_separate(0.05, 0.3, confidence=0.99) <= 425  # normal approximation: 420.44
    assert samples_to_separate(0.0, 0.5) is None
    assert samples_to_separate(0.2, 0.0) == 2  # floor of two pairs


def test_samples_to_separate_near_zero_and_huge_counts_return_at_once():
    """Averaged task scores on a 0.2 grid can cancel to a rounding-noise mean (0.2 + (0.8 - 1.0) = 2.8e-17): that
    is no difference, not a sample size of 1e34. A small real difference gets the normal approximation plus 2 pairs
    (t and normal differ by under 2 pairs past 10,000), at once."""
    diffs = [0.2, 0.8 - 1.0, 0.0, 0.0]
    mean = math.fsum(diffs) / 4
    sd = math.sqrt(math.fsum((d - mean) ** 2 for d in diffs) / 3)
    assert mean != 0 and samples_to_separate(mean, sd) is None
    assert samples_to_separate(0.01, 1.0) == math.ceil(((Z975 + Z80) * 100) ** 2) + 2 == 78491  # 78488.8 -> 78489
    assert samples_to_separate(1e-9, 1.0) == pytest.approx(((Z975 + Z80) * 1e9) ** 2, rel=1e-6)


def test_trials_to_separate_binary_connor():
    # pd = 0.25, delta = 0.15: (1.959964 * 0.5 + 0.841621 * sqrt(0.2275))^2 / 0.0225
    # = (0.979982 + 0.401428)^2 / 0.0225 = 1.908294 / 0.0225 = 84.81 -> 85.
    assert trials_to_separate_binary(0.2, 0.05) == 85
    expected = math.ceil((Z975 * math.sqrt(0.25) + Z80 * math.sqrt(0.25 - 0.15**2)) ** 2 / 0.15**2)
    assert trials_to_separate_binary(0.05, 0.2) == expected
    assert trials_to_separate_binary(0.1, 0.1) is None
    # The exact McNemar test needs 6 discordant pairs all one way at 95 % (2 * 0.5^5 = 0.0625, 2 * 0.5^6 = 0.031):
    # Connor's 4 for p10 = 1 would be a run that cannot separate.
    assert trials_to_separate_binary(1.0, 0.0) == 6
    assert mcnemar_exact(5, 0) > 0.05 and mcnemar_exact(6, 0) < 0.05
    with pytest.raises(ValueError):
        trials_to_separate_binary(0.7, 0.6)
