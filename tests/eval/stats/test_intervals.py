"""The intervals of ropectl.eval.stats against published tables and hand-computed closed forms, and the properties
that keep them honest at a handful of trials: never zero-width, always holding the estimate, narrowing with n.

Oracles: Newcombe (1998), "Two-sided confidence intervals for the single proportion", Stat Med 17:857, Table I
(Wilson score interval, method 3); Fagerland, Lydersen and Laake (2014), "Recommended tests and confidence intervals
for paired binomial proportions", Stat Med 33:2850, and their book (2017, ch. 8): the Cavo et al. (2012) paired
table [[59, 6], [16, 80]], Newcombe square-and-add interval -0.1186 to -0.0046, exact McNemar p = 0.052; and the
Wilson interval written here as the roots of its quadratic, (1 + z^2/n) pi^2 - (2 p + z^2/n) pi + p^2 = 0, a form
apart from the code's center +- half.
"""

from __future__ import annotations

import itertools
import math
import random

import pytest

from ropectl.eval.stats import mean_interval, paired_difference, paired_log_ratio, wilson_interval

Z = 1.959964  # two-sided 95 % normal quantile, from the standard table
Z2 = Z * Z


def wilson_roots(successes: float, n: int) -> tuple[float, float]:
    """Both roots of (p_hat - pi)^2 = z^2 pi (1 - pi) / n, by the quadratic formula."""
    p = successes / n
    a, b, c = 1 + Z2 / n, -(2 * p + Z2 / n), p * p
    root = math.sqrt(b * b - 4 * a * c)
    return (-b - root) / (2 * a), (-b + root) / (2 * a)


@pytest.mark.parametrize(("k", "n", "lo", "hi"), [
    (81, 263, 0.2553, 0.3662), (15, 148, 0.0624, 0.1605), (0, 20, 0.0, 0.1611), (1, 29, 0.0061, 0.1718),
])
def test_wilson_matches_newcombe_1998_table(k: int, n: int, lo: float, hi: float) -> None:
    assert wilson_interval(k, n) == (pytest.approx(lo, abs=5e-5), pytest.approx(hi, abs=5e-5))


@pytest.mark.parametrize(("k", "n", "lo", "hi"), [
    # 0/n: the upper end is z^2 / (n + z^2); n/n: the lower end is n / (n + z^2); the other end is exact.
    (2, 2, 2 / (2 + Z2), 1.0),  # 0.342380: the issue's [34 %, 100 %]
    (0, 1, 0.0, Z2 / (1 + Z2)),  # 0.793453
    (1, 1, 1 / (1 + Z2), 1.0),  # 0.206547
    (0, 3, 0.0, Z2 / (3 + Z2)),  # 0.561496
    (3, 3, 3 / (3 + Z2), 1.0),  # 0.438504
    # 1/2: (1 + z^2/2) pi^2 - (1 + z^2/2) pi + 1/4 = 0 -> (2.920730 -+ sqrt(5.609933)) / 5.841459
    (1, 2, 0.094532, 0.905468),
    (8, 10, 0.4902, 0.9433),
])
def test_wilson_hand_computed_small_n(k: int, n: int, lo: float, hi: float) -> None:
    got = wilson_interval(k, n)
    assert got == (pytest.approx(lo, abs=5e-5), pytest.approx(hi, abs=5e-5))
    assert got == (pytest.approx(max(0.0, wilson_roots(k, n)[0]), abs=1e-7),
                   pytest.approx(min(1.0, wilson_roots(k, n)[1]), abs=1e-7))
    assert wilson_interval(2, 2) == (pytest.approx(0.3424, abs=1e-4), 1.0)


def test_wilson_properties() -> None:
    """Never zero-width for finite n, 0/n and n/n included; holds p_hat; at p_hat 0 or 1 it narrows with every trial."""
    for n in range(1, 80):
        for k in range(n + 1):
            lo, hi = wilson_interval(k, n)
            assert 0.0 <= lo <= k / n <= hi <= 1.0 and hi - lo > 0, (k, n)
    widths = [wilson_interval(0, n)[1] for n in (1, 2, 3, 5, 10, 100, 10**4, 10**6)]
    assert all(a > b > 0 for a, b in zip(widths, widths[1:]))
    assert [1 - wilson_interval(n, n)[0] for n in (1, 2, 3, 10**6)] == pytest.approx([w for w in widths[:3]]
                                                                                     + [widths[-1]], rel=1e-9)
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


def test_mean_interval_is_wilson_on_the_summed_scores() -> None:
    # Two trials that both pass: [34 %, 100 %], never the old [100 %, 100 %].
    two = mean_interval([1.0, 1.0])
    assert (two.mean, two.lo, two.hi) == (1.0, pytest.approx(2 / (2 + Z2), abs=1e-6), 1.0)
    one = mean_interval([0.0])
    assert (one.lo, one.hi) == (0.0, pytest.approx(Z2 / (1 + Z2), abs=1e-6))
    # Fractional scores (niah_multivalue finds 1, 2 or 4 of 4 values): the sum 1.75 of 3 trials, by the quadratic.
    frac = mean_interval([0.25, 0.5, 1.0])
    assert frac.mean == pytest.approx(1.75 / 3)
    assert (frac.lo, frac.hi) == tuple(pytest.approx(x, abs=1e-7) for x in wilson_roots(1.75, 3))
    flat = mean_interval([0.5, 0.5, 0.5])
    assert flat.lo < 0.5 < flat.hi  # zero spread is not zero width
    with pytest.raises(ValueError):
        mean_interval([])
    with pytest.raises(ValueError):
        mean_interval([0.5, 1.5])


def test_wilson_on_fractional_scores_keeps_its_coverage() -> None:
    """Why the summed scores may use Wilson: a score in [0, 1] with mean mu has variance <= mu (1 - mu), the
    binomial variance Wilson assumes. Seeded simulation: scores on RULER's 0/0.25/.../1 grid, less spread than
    0/1 trials with the same mean, cover their mean at least as often as 95 %, at 3 to 20 trials."""
    rng = random.Random(0)
    values, weights = (0.0, 0.25, 0.5, 0.75, 1.0), (0.05, 0.15, 0.3, 0.3, 0.2)
    mu = sum(v * w for v, w in zip(values, weights))
    for n in (3, 5, 10, 20):
        hits = sum(lo <= mu <= hi for lo, hi in (
            (s.lo, s.hi) for s in (mean_interval(rng.choices(values, weights, k=n)) for _ in range(2000))))
        assert hits / 2000 >= 0.95, (n, hits)


def test_paired_difference_matches_the_published_cavo_example() -> None:
    a = [1] * 59 + [1] * 6 + [0] * 16 + [0] * 80  # before consolidation: responded
    b = [1] * 59 + [0] * 6 + [1] * 16 + [0] * 80  # after
    res = paired_difference(a, b)
    assert res.diff == pytest.approx(-0.0621, abs=5e-5)
    assert (res.lo, res.hi) == (pytest.approx(-0.1186, abs=5e-5), pytest.approx(-0.0046, abs=5e-5))
    assert res.p_value == pytest.approx(0.052, abs=5e-4) and res.test == "mcnemar"
    assert not res.separable  # the interval excludes 0 but the exact test does not reject: both must


@pytest.mark.parametrize(("a", "b", "lo", "hi"), [
    # Both 2/2: psi = 0 (a margin is empty), so lo = -(1 - 2/(2 + z^2)), hi = +(1 - 2/(2 + z^2)).
    ([1, 1], [1, 1], -Z2 / (2 + Z2), Z2 / (2 + Z2)),  # +-0.657620: the old "+0% [+0%, +0%]"
    # Identical 1/2: A = 1 = N/2 -> psi = 0: +-sqrt(2) (0.5 - 0.094532).
    ([1, 0], [1, 0], -0.573419, 0.573419),
    # Opposite: A = -4 -> psi = -1; Wilson 2/4 half-width h = sqrt(3.843031 - 1.960365) / 3.920730 = 0.349961: +-2h.
    ([1, 0, 1, 0], [0, 1, 0, 1], -0.699922, 0.699922),
    # One pair: lo = 1 - sqrt(2) z^2 / (1 + z^2), hi = 1.
    ([1], [0], 1 - math.sqrt(2) * Z2 / (1 + Z2), 1.0),
    # Six all one way: lo = 1 - sqrt(2) z^2 / (6 + z^2) = 0.448381.
    ([1] * 6, [0] * 6, 1 - math.sqrt(2) * Z2 / (6 + Z2), 1.0),
])
def test_paired_difference_hand_computed(a: list[int], b: list[int], lo: float, hi: float) -> None:
    res = paired_difference(a, b)
    assert (res.lo, res.hi) == (pytest.approx(lo, abs=1e-5), pytest.approx(hi, abs=1e-5))


def test_paired_difference_decisions() -> None:
    # Five all one way: the interval excludes 0 (lo 0.3855) but the exact sign test gives 0.0625: not separable.
    five = paired_difference([1] * 5, [0] * 5)
    assert five.lo == pytest.approx(1 - math.sqrt(2) * Z2 / (5 + Z2), abs=1e-6) and five.lo > 0
    assert (five.p_value, five.separable) == (0.0625, False)
    six = paired_difference([0] * 6, [1] * 6)
    assert (six.diff, six.p_value, six.separable) == (-1.0, 0.03125, True)
    # 20/20 against 2/20: 18 discordant pairs all one way, McNemar p = 2 / 2^18.
    clear = paired_difference([1] * 20, [1, 1] + [0] * 18)
    assert clear.p_value == pytest.approx(2 / 2**18) and clear.separable and clear.lo > 0
    # Fractional scores: the exact sign test on 4 positive differences and a tie, 2 / 2^4.
    frac = paired_difference([0.5, 1.0, 0.75, 1.0, 0.25], [0.25, 0.5, 0.75, 0.5, 0.0])
    assert (frac.test, frac.p_value, frac.separable) == ("sign", 0.125, False)
    tied = paired_difference([1, 0, 1], [1, 0, 1])
    assert (tied.diff, tied.p_value, tied.separable) == (0.0, 1.0, False) and tied.lo < 0 < tied.hi
    with pytest.raises(ValueError):
        paired_difference([1, 0], [1])
    with pytest.raises(ValueError):
        paired_difference([], [])


def test_paired_difference_never_zero_width() -> None:
    """Every 0/1 table of up to 4 pairs and a grid of fractional pairs: a real interval that holds the estimate."""
    cases = [list(zip(*pairs)) for n in range(1, 5) for pairs in itertools.product(
        [(0, 0), (0, 1), (1, 0), (1, 1)], repeat=n)]
    grid = (0.0, 0.25, 0.5, 1.0)
    cases += [list(zip(*pairs)) for pairs in itertools.product(itertools.product(grid, grid), repeat=2)]
    for a, b in cases:
        res = paired_difference(a, b)
        assert -1.0 <= res.lo <= res.diff <= res.hi <= 1.0 and res.hi - res.lo > 0.1, (a, b, res)


def test_paired_log_ratio_hand_example() -> None:
    nll_a, nll_b, tokens = [250.0, 420.0, 260.0], [240.0, 400.0, 230.0], [100, 200, 100]
    # log ratio = (930 - 870) / 400 = 0.15. Residuals e_i = delta_i - 0.15 * tokens_i = [-5, -10, 15],
    # sum e^2 = 350, se = sqrt(3/2 * 350) / 400 = 0.0572822, half = 4.302653 * se = 0.246465 (t, 2 df).
    res = paired_log_ratio(nll_a, nll_b, tokens)
    assert res.n == 3 and res.ratio == pytest.approx(math.exp(0.15), rel=1e-12)
    half = 4.302653 * math.sqrt(1.5 * 350) / 400
    assert (res.lo, res.hi) == (pytest.approx(math.exp(0.15 - half), rel=1e-6),
                                pytest.approx(math.exp(0.15 + half), rel=1e-6))
    assert not res.separable


def test_paired_log_ratio_equals_ratio_of_token_weighted_perplexities() -> None:
    nll_a, nll_b, tokens = [812.3, 95.1, 3310.0, 47.7], [790.0, 96.4, 3202.5, 45.1], [400, 64, 1500, 20]
    ppl_a, ppl_b = math.exp(sum(nll_a) / sum(tokens)), math.exp(sum(nll_b) / sum(tokens))
    assert paired_log_ratio(nll_a, nll_b, tokens).ratio == pytest.approx(ppl_a / ppl_b, rel=1e-12)


def test_paired_log_ratio_needs_six_documents_to_separate() -> None:
    """Two documents that agree closely give a t interval (1 df) that excludes 1 and p < 0.05: the old demo's
    "separated" on PPL. Below 6 documents it is not separable; the same pattern on 6 documents is (control)."""
    per_token = [0.100, 0.101, 0.102, 0.099, 0.1005, 0.0995]
    for n, separable in ((2, False), (4, False), (5, False), (6, True)):
        d = per_token[:n]
        res = paired_log_ratio([100.0 + 100 * x for x in d], [100.0] * n, [100] * n)
        mean, sd = sum(d) / n, math.sqrt(sum((x - sum(d) / n) ** 2 for x in d) / (n - 1))
        assert res.ratio == pytest.approx(math.exp(mean), rel=1e-12)
        assert res.lo == pytest.approx(math.exp(mean - {2: 12.706205, 4: 3.182446, 5: 2.776445, 6: 2.570582}[n]
                                                * sd / math.sqrt(n)), rel=1e-6)
        assert res.lo > 1 and res.p_value < 0.05 and res.separable is separable, n


def test_paired_log_ratio_degenerate_cases() -> None:
    one = paired_log_ratio([210.0], [200.0], [100])
    assert (one.ratio, one.lo, one.hi, one.separable) == (pytest.approx(math.exp(0.1)), 0.0, math.inf, False)
    # No spread (identical methods, or every document moved by the same amount): no interval to size, not (1, 1).
    same = paired_log_ratio([5.0, 7.0], [5.0, 7.0], [3, 4])
    assert (same.ratio, same.lo, same.hi, same.separable, same.p_value) == (1.0, 0.0, math.inf, False, 1.0)
    flat = paired_log_ratio([110.0] * 8, [100.0] * 8, [100] * 8)
    assert (flat.lo, flat.hi, flat.separable, flat.p_value) == (0.0, math.inf, False, 2 / 2**8)
    with pytest.raises(ValueError):
        paired_log_ratio([1.0, 2.0], [1.0, 2.0], [3, 0])
    with pytest.raises(ValueError):
        paired_log_ratio([1.0, 2.0], [1.0, 2.0], [3])
