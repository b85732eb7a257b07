"""Effective length under an interval rule, the one rule eval-tasks (RULER's absolute threshold) and report
(NoLiMa's relative one) both apply.

A length *counts* when the lower end of its score's interval is at or above the threshold, *fails* when the upper
end is below it, and is *undecided* otherwise. The effective length is the longest length that counts with every
shorter one counting too. Where the first length that does not count is undecided, the intervals cannot tell: the
effective length is not determined (it is at least the last counted length). A mean above the threshold on a
handful of trials (2/2 gives a Wilson interval of [34 %, 100 %]) never counts on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

COUNTS, FAILS, UNDECIDED = "counts", "fails", "undecided"
MAX_SAMPLES = 100_000  # the search for a deciding sample size stops here


@dataclass(frozen=True, kw_only=True)
class Point:
    length: int
    lo: float
    hi: float


@dataclass(frozen=True, kw_only=True)
class Effective:
    length: int | None  # the longest counted length; None when the shortest does not count
    determined: bool
    stopped_at: int | None  # the first length that does not count; None when every length counts
    statuses: tuple[tuple[int, str], ...]  # (length, counts | fails | undecided), shortest first

    def status(self, length: int) -> str | None:
        return dict(self.statuses).get(length)


def status(lo: float, hi: float, threshold: float) -> str:
    if lo >= threshold:
        return COUNTS
    return FAILS if hi < threshold else UNDECIDED


def effective_length(points: Sequence[Point], threshold: float) -> Effective:
    ordered = sorted(points, key=lambda p: p.length)
    statuses = tuple((p.length, status(p.lo, p.hi, threshold)) for p in ordered)
    best = None
    for length, state in statuses:
        if state != COUNTS:
            return Effective(length=best, determined=state == FAILS, stopped_at=length, statuses=statuses)
        best = length
    return Effective(length=best, determined=True, stopped_at=None, statuses=statuses)


def samples_to_decide(interval_at: Callable[[int], tuple[float, float]], threshold: float, start: int) -> int | None:
    """The fewest samples (above ``start``) at which ``interval_at(n)``, the interval the observed proportions would
    give on n samples, no longer straddles the threshold; None when none up to MAX_SAMPLES does (a score at the
    threshold itself)."""
    def decided(n: int) -> bool:
        return status(*interval_at(n), threshold) != UNDECIDED

    lo, hi = max(1, start), max(2, start * 2)
    while not decided(hi):
        if hi >= MAX_SAMPLES:
            return None
        lo, hi = hi, min(MAX_SAMPLES, hi * 2)
    while hi - lo > 1:  # bisection: more samples only narrow the interval around the same proportions
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if decided(mid) else (mid, hi)
    return hi
