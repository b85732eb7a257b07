"""Paired statistics for comparing RoPE scaling methods: intervals, exact tests, sample sizes.

Every method sees the same documents and the same generated trials, so comparisons are paired:
per-item differences cancel the item-to-item variance that dwarfs the method effect. Pure stdlib
(math, statistics) so `recommend` can use it without numpy/scipy.

Intervals that never claim more than was run: a handful of trials that all agree (2/2, or two methods
tied on every trial) still leaves a wide interval, never a zero-width one.
- One score (a cell's mean over trials, each in [0, 1]): the Wilson score interval on the summed scores.
  For 0/1 trials it is Wilson's interval; for fractional scores (RULER's string_match_all) it is still
  valid because a variable in [0, 1] with mean p has variance at most p(1 - p), the binomial variance that
  Wilson's interval assumes, so the interval can only be conservative.
- A paired difference: Newcombe's square-and-add interval (Newcombe 1998, method 10; Fagerland, Lydersen
  and Laake 2014), which combines the two Wilson intervals with the paired correlation, and the exact sign
  test (on 0/1 trials: the exact McNemar test). The sign test is exact for any score distribution and
  closed-form at any n; a paired permutation (sign-flip) test would need symmetric differences, and
  inverting it gives a zero-width interval whenever every difference is equal.
- A comparison is `separable` only when its interval excludes "no difference" AND its exact p-value is
  below 1 - confidence, so an interval that is narrow by accident never crowns a winner on its own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ropectl.eval.distributions import normal_quantile, t_quantile, t_sf


@dataclass(frozen=True)
class MeanInterval:
    n: int
    mean: float
    lo: float
    hi: float


@dataclass(frozen=True)
class PairedDiff:
    n: int
    mean_a: float
    mean_b: float
    diff: float  # mean_a - mean_b
    lo: float
    hi: float
    p_value: float
    separable: bool
    test: str  # "mcnemar" (0/1 trials: exact McNemar), "sign" (exact sign test on fractional scores)


@dataclass(frozen=True)
class PairedRatio:
    n: int
    ratio: float  # PPL_a / PPL_b
    lo: float
    hi: float
    separable: bool
    p_value: float


def _alpha(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    return 1.0 - confidence


def _two_sided_z(confidence: float) -> float:
    return normal_quantile(1.0 - _alpha(confidence) / 2.0)


def min_pairs(confidence: float = 0.95) -> int:
    """The fewest pairs on which an exact sign test can reject at all: all k one way, 2 * 0.5^k < 1 - confidence
    (6 at 95 %: 5 pairs give p = 0.0625). Below it no distribution-free paired test separates two methods."""
    return math.floor(math.log2(2.0 / _alpha(confidence))) + 1


def wilson_interval(successes: float, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for the proportion successes / n; (0, 1) when n == 0.

    `successes` may be a sum of scores in [0, 1] (see the module's note). The end at 0/n or n/n is exactly 0
    or 1 (the closed forms z^2 / (n + z^2) and n / (n + z^2) give the other end).
    """
    if n < 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got {successes}/{n}")
    z = _two_sided_z(confidence)
    if n == 0:
        return 0.0, 1.0
    p, z2 = successes / n, z * z
    denom = 1.0 + z2 / n
    center = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1.0 - p) / n + z2 / (4 * n * n)) / denom
    # At p = 0 or 1 the formula's end is 0 or 1 up to rounding: pin it, so the interval always holds p.
    lo = 0.0 if successes == 0 else min(p, max(0.0, center - half))
    hi = 1.0 if successes == n else max(p, min(1.0, center + half))
    return lo, hi


def _unit_scores(scores: Sequence[float], what: str) -> None:
    if any(not -1e-9 <= s <= 1.0 + 1e-9 for s in scores):  # slack: a mean of fractions may round past 1
        raise ValueError(f"{what} must lie in [0, 1]")


def mean_interval(scores: Sequence[float], confidence: float = 0.95) -> MeanInterval:
    """Mean of per-trial scores in [0, 1] with the Wilson interval on their sum (never zero-width).

    Empty input raises ValueError.
    """
    n = len(scores)
    if n == 0:
        raise ValueError("mean_interval needs at least one score")
    _unit_scores(scores, "scores")
    total = math.fsum(scores)
    lo, hi = wilson_interval(min(float(n), max(0.0, total)), n, confidence)
    return MeanInterval(n, total / n, lo, hi)


def mcnemar_exact(n10: int, n01: int) -> float:
    """Exact two-sided McNemar p-value from discordant counts: min(1, 2 * Binom(n10 + n01, 1/2).cdf(min)).

    The same number is the exact sign test with n10 positive and n01 negative differences (ties dropped).
    """
    if n10 < 0 or n01 < 0:
        raise ValueError(f"discordant counts must be non-negative, got {n10}, {n01}")
    m, k = n10 + n01, min(n10, n01)
    if m == 0:
        return 1.0
    # Exact integers, one correctly rounded division: no underflow of 0.5**m for long runs.
    return min(1.0, 2 * sum(math.comb(m, i) for i in range(k + 1)) / 2**m)


def _check_paired(a: Sequence[float], b: Sequence[float]) -> int:
    if len(a) != len(b):
        raise ValueError(f"paired inputs differ in length: {len(a)} vs {len(b)}")
    if not a:
        raise ValueError("paired comparison needs at least one pair")
    return len(a)


def _newcombe_psi(a: Sequence[float], b: Sequence[float], mean_a: float, mean_b: float) -> float:
    """Newcombe's corrected correlation of the pairs. On 0/1 trials with table counts n11, n12, n21, n22:
    A = n11 n22 - n12 n21; (A - N/2) / sqrt(row and column totals' product) when A > N/2, 0 when 0 <= A <= N/2,
    A / sqrt(...) when A < 0; 0 when a margin is 0. A = N^2 cov and the product is N^4 var_a var_b (population
    moments), which is the form used here, so fractional scores get the same rule."""
    n = len(a)
    cov = math.fsum((x - mean_a) * (y - mean_b) for x, y in zip(a, b)) / n
    var = math.fsum((x - mean_a) ** 2 for x in a) / n * math.fsum((y - mean_b) ** 2 for y in b) / n
    if var <= 0.0:
        return 0.0
    # The N/2 correction keeps psi < 1: identical sequences would otherwise give a zero-width interval.
    shrunk = cov - 1.0 / (2 * n) if cov > 1.0 / (2 * n) else min(cov, 0.0)
    return shrunk / math.sqrt(var)


def paired_difference(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> PairedDiff:
    """Mean paired difference a - b of per-trial scores in [0, 1]: Newcombe's square-and-add interval and the
    exact sign test.

    With (la, ua), (lb, ub) the Wilson intervals of the two means and psi the corrected correlation:
    lo = diff - sqrt((ma - la)^2 + (ub - mb)^2 - 2 psi (ma - la)(ub - mb)),
    hi = diff + sqrt((mb - lb)^2 + (ua - ma)^2 - 2 psi (mb - lb)(ua - ma)), clipped to [-1, 1]. Never zero-width
    (psi < 1). p: the exact two-sided sign test on the nonzero differences (ties dropped; every difference 0 ->
    p = 1); on 0/1 trials it is exact McNemar. separable = interval excludes 0 and p < 1 - confidence.
    """
    n, alpha = _check_paired(a, b), _alpha(confidence)
    _unit_scores([*a, *b], "paired scores")
    mean_a, mean_b = math.fsum(a) / n, math.fsum(b) / n
    diff = mean_a - mean_b
    (la, ua), (lb, ub) = (wilson_interval(min(float(n), max(0.0, math.fsum(x))), n, confidence) for x in (a, b))
    psi = _newcombe_psi(a, b, mean_a, mean_b)
    below, above = (mean_a - la, ub - mean_b), (mean_b - lb, ua - mean_a)
    lo = diff - math.sqrt(max(0.0, below[0] ** 2 + below[1] ** 2 - 2 * psi * below[0] * below[1]))
    hi = diff + math.sqrt(max(0.0, above[0] ** 2 + above[1] ** 2 - 2 * psi * above[0] * above[1]))
    lo, hi = max(-1.0, lo), min(1.0, hi)
    pos, neg = sum(x > y for x, y in zip(a, b)), sum(x < y for x, y in zip(a, b))
    p = mcnemar_exact(pos, neg)
    test = "mcnemar" if all(v in (0.0, 1.0) for v in (*a, *b)) else "sign"
    return PairedDiff(n, mean_a, mean_b, diff, lo, hi, p, (lo > 0 or hi < 0) and p < alpha, test)


def paired_log_ratio(
    nll_a: Sequence[float], nll_b: Sequence[float], tokens: Sequence[int], confidence: float = 0.95
) -> PairedRatio:
    """Perplexity ratio PPL_a / PPL_b from per-document NLL sums over the same documents and tokens.

    ratio = exp((sum nll_a - sum nll_b) / sum tokens): exactly the ratio of token-weighted perplexities.
    Its log is the token-weighted mean of d_i = (nll_a_i - nll_b_i) / tokens_i; the interval is Student-t
    (df = n - 1) with the ratio-estimator standard error se^2 = n / (n - 1) * sum(e_i^2) / (sum tokens)^2,
    e_i = nll_a_i - nll_b_i - log_ratio * tokens_i, which is the plain paired-t s / sqrt(n) when all token
    counts are equal. p: the paired t-test; the exact sign test's p where there is no spread.
    separable = at least min_pairs(confidence) documents (6 at 95 %: the t interval at 1 to 4 df rests on a
    normality that so few documents cannot show, and no exact test can reject on fewer), the interval
    excludes 1 and p < 1 - confidence. n == 1 or zero spread (no spread to size an interval from):
    interval (0, inf), not separable.
    """
    n, alpha = _check_paired(nll_a, nll_b), _alpha(confidence)
    if len(tokens) != n:
        raise ValueError(f"tokens has {len(tokens)} entries for {n} documents")
    if any(t <= 0 for t in tokens):
        raise ValueError("every document needs a positive token count")
    total = math.fsum(tokens)
    deltas = [x - y for x, y in zip(nll_a, nll_b)]
    log_ratio = math.fsum(deltas) / total
    ratio = math.exp(log_ratio)
    resid = [dl - log_ratio * t for dl, t in zip(deltas, tokens)]
    se = math.sqrt(n / (n - 1) * math.fsum(e * e for e in resid)) / total if n > 1 else 0.0
    if se == 0.0:
        return PairedRatio(n, ratio, 0.0, math.inf, False, mcnemar_exact(sum(d > 0 for d in deltas),
                                                                          sum(d < 0 for d in deltas)))
    half = t_quantile(1.0 - alpha / 2.0, n - 1) * se
    p = 2.0 * t_sf(abs(log_ratio) / se, n - 1)
    lo, hi = log_ratio - half, log_ratio + half
    separable = n >= min_pairs(confidence) and (lo > 0 or hi < 0) and p < alpha
    return PairedRatio(n, ratio, math.exp(lo), math.exp(hi), separable, p)


def _ceil_count(x: float) -> int:
    # A tiny slack so that an exact integer that rounding pushed a hair above it does not gain one.
    return max(2, math.ceil(x - 1e-9))


def _power_z(power: float) -> float:
    if not 0.0 < power < 1.0:
        raise ValueError(f"power must lie in (0, 1), got {power}")
    return normal_quantile(power)


T_SEARCH_MAX = 10_000  # above this many pairs the sample size uses the normal approximation plus 2


def samples_to_separate(diff: float, sd: float, confidence: float = 0.95, power: float = 0.8) -> int | None:
    """Pairs needed for the paired t-test to separate a mean difference `diff` with per-pair spread `sd`.

    The smallest n >= 2 with n >= ((t_{1-alpha/2, n-1} + t_{power, n-1}) * sd / diff)^2: Student's t, not the
    normal, because the interval it must separate is a t interval, and at a few documents the normal's answer
    can be no more than the n that just failed (1 df: t = 12.7, not 1.96). None when diff == 0.
    """
    if sd < 0:
        raise ValueError(f"sd must be non-negative, got {sd}")
    _power_z(power)  # validates power
    if abs(diff) <= 1e-12 * sd:  # zero, or rounding noise of a zero mean: no sample size separates it
        return None
    alpha, ratio = _alpha(confidence), sd / diff
    # t quantiles exceed the normal's, so the normal approximation's n is where the search starts
    n = _ceil_count(((_two_sided_z(confidence) + _power_z(power)) * ratio) ** 2)
    if n > T_SEARCH_MAX:  # t and normal differ by under 2 pairs here, and df this large is slow to invert
        return n + 2
    while n < ((t_quantile(1.0 - alpha / 2.0, n - 1) + t_quantile(power, n - 1)) * ratio) ** 2 - 1e-9:
        n += 1
    return n


def trials_to_separate_binary(p10: float, p01: float, confidence: float = 0.95, power: float = 0.8) -> int | None:
    """Paired binary trials for McNemar to separate discordance rates p10 (a right, b wrong) and p01.

    Connor (1987): n = (z_{1-alpha/2} sqrt(pd) + z_power sqrt(pd - delta^2))^2 / delta^2, pd = p10 + p01,
    delta = p10 - p01; at least 2, and at least the trials that hold the 6 discordant pairs the exact test
    needs at 95 % (5 all one way give p = 0.0625). None when delta == 0.
    """
    if p10 < 0 or p01 < 0 or p10 + p01 > 1:
        raise ValueError(f"need p10, p01 >= 0 and p10 + p01 <= 1, got {p10}, {p01}")
    delta, pd = p10 - p01, p10 + p01
    if delta == 0:
        return None
    root = _two_sided_z(confidence) * math.sqrt(pd) + _power_z(power) * math.sqrt(max(0.0, pd - delta * delta))
    # The exact test cannot reject on fewer than min_pairs discordant pairs even if all go one way, so at least
    # min_pairs / pd trials are needed where Connor's normal approximation asks fewer.
    return max(_ceil_count(root * root / (delta * delta)), _ceil_count(min_pairs(confidence) / pd))


def ratio_interval(a: MeanInterval, b: MeanInterval) -> tuple[float, float, float]:
    """The ratio mean_a / mean_b of two independent scores with a MOVER-R interval (Zou & Donner 2008; Newcombe 2013,
    ch. 10): each end recovered from the two Wilson intervals, as Newcombe's square-and-add recovers a difference's.

    L = (pa pb - sqrt((pa pb)^2 - la ub (2 pa - la)(2 pb - ub))) / (ub (2 pb - ub)),
    U = (pa pb + sqrt((pa pb)^2 - ua lb (2 pa - ua)(2 pb - lb))) / (lb (2 pb - lb)).
    Chosen over Katz's log ratio, whose variance 1/x - 1/n is 0 at a perfect score (a zero-width interval from 2/2)
    and undefined at a zero one; over a bootstrap, which at a few trials resamples one value. Returns (ratio, lo, hi);
    hi is inf when b's lower end is 0. ValueError when mean_b is 0 (no ratio).
    """
    pa, la, ua, pb, lb, ub = a.mean, a.lo, a.hi, b.mean, b.lo, b.hi
    if pb <= 0:
        raise ValueError("the ratio's denominator has a mean of 0")
    both = pa * pb
    below = ub * (2 * pb - ub)
    lo = (both - math.sqrt(max(0.0, both * both - la * ub * (2 * pa - la) * (2 * pb - ub)))) / below if below > 0 else 0.0
    above = lb * (2 * pb - lb)
    hi = (both + math.sqrt(max(0.0, both * both - ua * lb * (2 * pa - ua) * (2 * pb - lb)))) / above if above > 0 \
        else math.inf
    return pa / pb, max(0.0, min(lo, pa / pb)), max(hi, pa / pb)
