"""Paired statistics for comparing RoPE scaling methods: intervals, exact tests, sample sizes.

Every method sees the same documents and the same generated trials, so comparisons are paired:
per-item differences cancel the item-to-item variance that dwarfs the method effect. Pure stdlib
(math, statistics) so `recommend` can use it without numpy/scipy.

Conservative by design: a comparison is `separable` only when its interval excludes "no difference"
AND its p-value is below 1 - confidence, so an interval that is narrow by accident (few items, zero
spread) never crowns a winner on its own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

_CF_EPS = 1e-15
_CF_TINY = 1e-300
_CF_MAX_ITER = 100_000  # the continued fraction needs O(sqrt(df)) terms: ample for any df in practice


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
    test: str  # "mcnemar" (binary trials), "t" (paired t), "sign" (zero spread) or "none"


@dataclass(frozen=True)
class PairedRatio:
    n: int
    ratio: float  # PPL_a / PPL_b
    lo: float
    hi: float
    separable: bool
    p_value: float


def normal_quantile(p: float) -> float:
    """Standard normal quantile."""
    return NormalDist().inv_cdf(p)


def _beta_cf(x: float, a: float, b: float) -> float:
    """Continued fraction of the incomplete beta (modified Lentz), valid for x < (a+1)/(a+b+2)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _CF_TINY else _CF_TINY)
    h = d
    for m in range(1, _CF_MAX_ITER + 1):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > _CF_TINY else _CF_TINY)
            c = 1.0 + num / c
            c = c if abs(c) > _CF_TINY else _CF_TINY
            delta = c * d
            h *= delta
        if abs(delta - 1.0) < _CF_EPS:
            return h
    raise ArithmeticError(f"incomplete beta continued fraction did not converge (x={x}, a={a}, b={b})")


def reg_inc_beta(x: float, a: float, b: float) -> float:
    """Regularized incomplete beta I_x(a, b) for a, b > 0 and 0 <= x <= 1."""
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"x must lie in [0, 1], got {x}")
    if x in (0.0, 1.0):
        return x
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    # The fraction converges fast only below the mode; above it, the symmetry I_x(a,b) = 1 - I_{1-x}(b,a) applies.
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_cf(x, a, b) / a
    return 1.0 - math.exp(log_front) * _beta_cf(1.0 - x, b, a) / b


def t_sf(t: float, df: float) -> float:
    """Upper tail P(T > t) of Student's t with df degrees of freedom."""
    if df <= 0:
        raise ValueError(f"df must be positive, got {df}")
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * reg_inc_beta(df / (df + t * t), df / 2.0, 0.5)
    return tail if t >= 0 else 1.0 - tail


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) of Student's t with df degrees of freedom."""
    return 1.0 - t_sf(t, df)


def t_quantile(p: float, df: float) -> float:
    """Student-t quantile: the t with P(T <= t) = p (bracketing, then bisection to float precision)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must lie in (0, 1), got {p}")
    if df <= 0:
        raise ValueError(f"df must be positive, got {df}")
    if p == 0.5:
        return 0.0
    # Solve on the upper tail (symmetry): a tail probability keeps full relative precision near p = 1.
    tail = min(p, 1.0 - p)
    lo, hi = 0.0, 1.0
    while t_sf(hi, df) > tail:
        lo, hi = hi, hi * 2.0
    # Bisection is robust where Newton overshoots (df = 1 tails); ~60 steps reach float resolution.
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if t_sf(mid, df) > tail:
            lo = mid
        else:
            hi = mid
    t = 0.5 * (lo + hi)
    return t if p > 0.5 else -t


def _alpha(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    return 1.0 - confidence


def _two_sided_z(confidence: float) -> float:
    return normal_quantile(1.0 - _alpha(confidence) / 2.0)


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for one accuracy successes/n; (0, 1) when n == 0."""
    if n < 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got {successes}/{n}")
    z = _two_sided_z(confidence)
    if n == 0:
        return 0.0, 1.0
    p, z2 = successes / n, z * z
    denom = 1.0 + z2 / n
    center = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1.0 - p) / n + z2 / (4 * n * n)) / denom
    return max(0.0, center - half), min(1.0, center + half)


def _mean_sd(xs: Sequence[float]) -> tuple[float, float]:
    n = len(xs)
    mean = math.fsum(xs) / n
    var = math.fsum((x - mean) ** 2 for x in xs) / (n - 1) if n > 1 else 0.0
    return mean, math.sqrt(var)


def mean_interval(scores: Sequence[float], confidence: float = 0.95) -> MeanInterval:
    """Mean of per-trial scores in [0, 1] with a Student-t interval clipped to [0, 1].

    n == 1: (0, 1), the whole score range (one trial says nothing about spread). Zero spread
    (n >= 2, all scores equal): the degenerate interval (mean, mean). Empty input raises ValueError.
    """
    n, alpha = len(scores), _alpha(confidence)
    if n == 0:
        raise ValueError("mean_interval needs at least one score")
    mean, sd = _mean_sd(scores)
    if n < 2:
        return MeanInterval(n, mean, 0.0, 1.0)
    half = t_quantile(1.0 - alpha / 2.0, n - 1) * sd / math.sqrt(n)
    return MeanInterval(n, mean, max(0.0, mean - half), min(1.0, mean + half))


def mcnemar_exact(n10: int, n01: int) -> float:
    """Exact two-sided McNemar p-value from discordant counts: min(1, 2 * Binom(n10 + n01, 1/2).cdf(min))."""
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


def paired_difference(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> PairedDiff:
    """Mean paired difference a - b of per-trial scores in [0, 1], interval clipped to [-1, 1].

    Interval: Student-t on d_i = a_i - b_i. p-value: exact McNemar when every d_i is 0 or +-1 (binary
    trials), else the paired t-test. Degenerate cases: every d_i == 0 -> interval (0, 0), p = 1; n == 1
    with d != 0 -> interval (-1, 1), p = 1; all d_i equal and nonzero (zero spread) -> interval (d, d)
    and the exact sign test on n same-signed pairs decides. separable = interval excludes 0 and
    p < 1 - confidence.
    """
    n, alpha = _check_paired(a, b), _alpha(confidence)
    d = [x - y for x, y in zip(a, b)]
    mean_a, mean_b = math.fsum(a) / n, math.fsum(b) / n
    diff, sd = _mean_sd(d)
    if all(x == 0 for x in d):
        return PairedDiff(n, mean_a, mean_b, 0.0, 0.0, 0.0, 1.0, False, "none")
    if n < 2:
        return PairedDiff(n, mean_a, mean_b, diff, -1.0, 1.0, 1.0, False, "none")
    if sd == 0.0:
        p = mcnemar_exact(n, 0)  # n pairs all on one side: the sign test
        return PairedDiff(n, mean_a, mean_b, diff, diff, diff, p, p < alpha, "sign")
    half = t_quantile(1.0 - alpha / 2.0, n - 1) * sd / math.sqrt(n)
    lo, hi = max(-1.0, diff - half), min(1.0, diff + half)
    if all(x in (-1.0, 0.0, 1.0) for x in d):
        p, test = mcnemar_exact(sum(x == 1.0 for x in d), sum(x == -1.0 for x in d)), "mcnemar"
    else:
        p, test = 2.0 * t_sf(abs(diff) / (sd / math.sqrt(n)), n - 1), "t"
    return PairedDiff(n, mean_a, mean_b, diff, lo, hi, p, (lo > 0 or hi < 0) and p < alpha, test)


def paired_log_ratio(
    nll_a: Sequence[float], nll_b: Sequence[float], tokens: Sequence[int], confidence: float = 0.95
) -> PairedRatio:
    """Perplexity ratio PPL_a / PPL_b from per-document NLL sums over the same documents and tokens.

    ratio = exp((sum nll_a - sum nll_b) / sum tokens): exactly the ratio of token-weighted perplexities.
    Its log is the token-weighted mean of d_i = (nll_a_i - nll_b_i) / tokens_i; the interval is Student-t
    (df = n - 1) with the ratio-estimator standard error se^2 = n / (n - 1) * sum(e_i^2) / (sum tokens)^2,
    e_i = nll_a_i - nll_b_i - log_ratio * tokens_i, which is the plain paired-t s / sqrt(n) when all token
    counts are equal. n == 1 -> interval (0, inf), not separable. Zero spread: every difference 0 ->
    (1, 1), p = 1; otherwise (ratio, ratio) with the sign test deciding, as in paired_difference.
    separable = interval excludes 1 and p < 1 - confidence.
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
    if n < 2:
        return PairedRatio(n, ratio, 0.0, math.inf, False, 1.0)
    resid = [dl - log_ratio * t for dl, t in zip(deltas, tokens)]
    se = math.sqrt(n / (n - 1) * math.fsum(e * e for e in resid)) / total
    if se == 0.0:
        if all(dl == 0 for dl in deltas):
            return PairedRatio(n, ratio, ratio, ratio, False, 1.0)
        p = mcnemar_exact(n, 0)  # every document moved the same way by the same per-token amount
        return PairedRatio(n, ratio, ratio, ratio, p < alpha, p)
    half = t_quantile(1.0 - alpha / 2.0, n - 1) * se
    p = 2.0 * t_sf(abs(log_ratio) / se, n - 1)
    lo, hi = log_ratio - half, log_ratio + half
    return PairedRatio(n, ratio, math.exp(lo), math.exp(hi), (lo > 0 or hi < 0) and p < alpha, p)


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
    # The exact test cannot reject on fewer than k discordant pairs even if all go one way (2 * 0.5^k < alpha:
    # k = 6 at 95 %), so at least k / pd trials are needed where Connor's normal approximation asks fewer.
    least_discordant = math.floor(math.log2(2.0 / _alpha(confidence))) + 1
    return max(_ceil_count(root * root / (delta * delta)), _ceil_count(least_discordant / pd))
