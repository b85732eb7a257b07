"""ropectl.eval.stats against independent values: published tables, closed forms and hand arithmetic."""

from __future__ import annotations

import math

import pytest

from ropectl.eval.stats import (
    mcnemar_exact,
    mean_interval,
    paired_difference,
    paired_log_ratio,
    reg_inc_beta,
    samples_to_separate,
    t_quantile,
    t_sf,
    trials_to_separate_binary,
    wilson_interval,
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


def test_wilson_interval_published_values():
    # 8/10: p = 0.8, z^2/n = 0.384146, center = (0.8 + 0.192073) / 1.384146 = 0.716741,
    # half = 1.959964 * sqrt(0.016 + 0.009604) / 1.384146 = 0.226578 -> (0.4902, 0.9433).
    lo, hi = wilson_interval(8, 10)
    assert (lo, hi) == (pytest.approx(0.4902, abs=1e-4), pytest.approx(0.9433, abs=1e-4))
    # 0/2: center = half = 0.960365 / 2.920729 = 0.328810 -> (0, 0.657620).
    lo, hi = wilson_interval(0, 2)
    assert lo == 0.0
    assert hi == pytest.approx(0.657620, abs=1e-5)
    assert wilson_interval(0, 0) == (0.0, 1.0)
    assert wilson_interval(10, 10)[1] == 1.0
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


def test_mean_interval_hand_example_and_small_n():
    # [0.2, 0.4, 0.6]: mean 0.4, s = sqrt(0.08 / 2) = 0.2, half = 4.302653 * 0.2 / sqrt(3) = 0.496828.
    res = mean_interval([0.2, 0.4, 0.6])
    assert res.n == 3
    assert res.mean == pytest.approx(0.4)
    assert res.lo == 0.0  # 0.4 - 0.496828 clipped to the score range
    assert res.hi == pytest.approx(0.896828, abs=1e-6)
    one = mean_interval([0.7])
    assert (one.mean, one.lo, one.hi) == (0.7, 0.0, 1.0)  # n = 1: the whole score range
    flat = mean_interval([0.5, 0.5, 0.5])
    assert (flat.lo, flat.hi) == (0.5, 0.5)  # zero spread: degenerate
    with pytest.raises(ValueError):
        mean_interval([])


def test_mcnemar_exact_hand_values():
    assert mcnemar_exact(6, 0) == pytest.approx(0.03125)  # 2 * (1/2)^6
    assert mcnemar_exact(5, 1) == pytest.approx(0.21875)  # 2 * (1 + 6) / 64
    assert mcnemar_exact(1, 5) == mcnemar_exact(5, 1)
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(3, 3) == 1.0  # 2 * 42/64 clipped
    assert mcnemar_exact(2000, 0) < 1e-300  # exact integers: no overflow or error for long runs


def test_paired_difference_hand_worked_t():
    a = [0.5, 1.0, 0.75, 1.0, 0.25]
    b = [0.25, 0.5, 0.75, 0.5, 0.0]
    # d = [0.25, 0.5, 0, 0.5, 0.25], mean 0.3; squared deviations 0.0025 + 0.04 + 0.09 + 0.04 + 0.0025 = 0.175,
    # s^2 = 0.175 / 4 = 0.04375, se = sqrt(0.04375 / 5) = 0.0935414, half = 2.776445 * se = 0.259711.
    res = paired_difference(a, b)
    assert res.n == 5
    assert (res.mean_a, res.mean_b, res.diff) == (pytest.approx(0.7), pytest.approx(0.4), pytest.approx(0.3))
    assert res.lo == pytest.approx(0.040289, abs=1e-5)
    assert res.hi == pytest.approx(0.559711, abs=1e-5)
    assert res.test == "t"
    # p from the closed-form df = 4 CDF at t = 0.3 / 0.0935414.
    t = 0.3 / math.sqrt(0.04375 / 5)
    x = t / math.sqrt(1 + t * t / 4)
    cdf4 = 0.5 + 3 / 8 * x * (1 - t * t / (12 * (1 + t * t / 4)))
    assert res.p_value == pytest.approx(2 * (1 - cdf4), abs=1e-10)
    assert res.separable


def test_paired_difference_clear_winner_is_separable():
    # 20/20 vs 2/20 on the same trials: 18 discordant pairs all for a -> McNemar p = 2 / 2^18.
    # d: 18 ones, 2 zeros; mean 0.9, s^2 = (18 * 0.01 + 2 * 0.81) / 19, half = 2.093024 * s / sqrt(20) = 0.144053.
    res = paired_difference([1] * 20, [1, 1] + [0] * 18)
    assert res.diff == pytest.approx(0.9)
    assert res.lo == pytest.approx(0.9 - 0.144053, abs=1e-5)
    assert res.hi == 1.0  # clipped
    assert res.test == "mcnemar"
    assert res.p_value == pytest.approx(2 / 2**18)
    assert res.separable


def test_paired_difference_noise_is_not_separable():
    # 1/2 vs 0/2: d = [1, 0], half = 12.706205 * 0.5 -> clipped to [-1, 1]; McNemar(1, 0) = 1.
    res = paired_difference([1, 0], [0, 0])
    assert (res.diff, res.lo, res.hi, res.p_value) == (0.5, -1.0, 1.0, 1.0)
    assert not res.separable


def test_paired_difference_mcnemar_overrules_a_narrow_t_interval():
    # 5 discordant of 20, all for a: t interval 0.25 +- 2.093024 * 0.099339 = (0.0421, 0.4579) excludes 0,
    # but exact McNemar p = 2 / 2^5 = 0.0625: not separable.
    res = paired_difference([1] * 5 + [0] * 15, [0] * 20)
    assert res.lo == pytest.approx(0.042080, abs=1e-5)
    assert res.p_value == pytest.approx(0.0625)
    assert not res.separable


def test_paired_difference_degenerate_cases():
    tied = paired_difference([1, 0, 1], [1, 0, 1])
    assert (tied.diff, tied.lo, tied.hi, tied.p_value, tied.separable) == (0.0, 0.0, 0.0, 1.0, False)
    single = paired_difference([1], [0])
    assert (single.diff, single.lo, single.hi, single.p_value, single.separable) == (1.0, -1.0, 1.0, 1.0, False)
    # Zero spread, nonzero d: no division by zero; the sign test decides (5 pairs: 0.0625, 6 pairs: 0.03125).
    five = paired_difference([1] * 5, [0] * 5)
    assert (five.lo, five.hi, five.p_value, five.separable, five.test) == (1.0, 1.0, 0.0625, False, "sign")
    six = paired_difference([0] * 6, [1] * 6)
    assert (six.diff, six.p_value, six.separable) == (-1.0, 0.03125, True)
    with pytest.raises(ValueError):
        paired_difference([1, 0], [1])
    with pytest.raises(ValueError):
        paired_difference([], [])


def test_paired_log_ratio_hand_example():
    nll_a, nll_b, tokens = [250.0, 420.0, 260.0], [240.0, 400.0, 230.0], [100, 200, 100]
    # log ratio = (930 - 870) / 400 = 0.15. Residuals e_i = delta_i - 0.15 * tokens_i = [-5, -10, 15],
    # sum e^2 = 350, se = sqrt(3/2 * 350) / 400 = 0.0572822, half = 4.302653 * se = 0.246465.
    res = paired_log_ratio(nll_a, nll_b, tokens)
    assert res.n == 3
    assert res.ratio == pytest.approx(math.exp(0.15), rel=1e-12)
    half = 4.302653 * math.sqrt(1.5 * 350) / 400
    assert res.lo == pytest.approx(math.exp(0.15 - half), rel=1e-6)
    assert res.hi == pytest.approx(math.exp(0.15 + half), rel=1e-6)
    assert not res.separable


def test_paired_log_ratio_equals_ratio_of_token_weighted_perplexities():
    nll_a, nll_b, tokens = [812.3, 95.1, 3310.0, 47.7], [790.0, 96.4, 3202.5, 45.1], [400, 64, 1500, 20]
    ppl_a = math.exp(sum(nll_a) / sum(tokens))
    ppl_b = math.exp(sum(nll_b) / sum(tokens))
    assert paired_log_ratio(nll_a, nll_b, tokens).ratio == pytest.approx(ppl_a / ppl_b, rel=1e-12)


def test_paired_log_ratio_equal_tokens_is_plain_paired_t():
    # Per-token d = [0.10, 0.12, 0.11, 0.13]: mean 0.115, s^2 = 0.0005 / 3, half = 3.182446 * s / 2 = 0.0205426.
    res = paired_log_ratio([110.0, 112.0, 111.0, 113.0], [100.0] * 4, [100] * 4)
    half = 3.182446 * math.sqrt(0.0005 / 3) / 2
    assert res.ratio == pytest.approx(math.exp(0.115), rel=1e-12)
    assert res.lo == pytest.approx(math.exp(0.115 - half), rel=1e-6)
    assert res.hi == pytest.approx(math.exp(0.115 + half), rel=1e-6)
    assert res.separable and res.p_value < 0.05


def test_paired_log_ratio_degenerate_cases():
    one = paired_log_ratio([210.0], [200.0], [100])
    assert (one.ratio, one.lo, one.hi, one.separable) == (pytest.approx(math.exp(0.1)), 0.0, math.inf, False)
    same = paired_log_ratio([5.0, 7.0], [5.0, 7.0], [3, 4])
    assert (same.ratio, same.lo, same.hi, same.separable) == (1.0, 1.0, 1.0, False)
    with pytest.raises(ValueError):
        paired_log_ratio([1.0, 2.0], [1.0, 2.0], [3, 0])
    with pytest.raises(ValueError):
        paired_log_ratio([1.0, 2.0], [1.0, 2.0], [3])


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
