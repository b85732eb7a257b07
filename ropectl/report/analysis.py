"""The numbers of the card, from the two models' task rows and PPL cells: pure, and built only from
``ropectl.eval.stats`` (intervals), ``ropectl.eval.effective`` (the interval rule) and eval-tasks' own task average.

- Kept tasks: the base's Wilson lower bound at the reference length >= KEEP.
- Per length: the extended model's score (per trial, the mean over the kept tasks, as RULER averages) with its
  Wilson interval, and its ratio to the base's reference score with a MOVER-R interval (``stats.ratio_interval``).
  The trials at a length and at the reference are different prompts, so the two scores are independent, not paired.
- Retention: the paired PPL ratio EXTENDED / BASE per in-window length (``stats.paired_log_ratio``, per document),
  and the paired task-score difference at the reference length (the same trials for both models).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ropectl.eval.effective import Effective, Point, effective_length, samples_to_decide
from ropectl.eval.stats import (
    MeanInterval,
    PairedDiff,
    PairedRatio,
    mean_interval,
    paired_difference,
    paired_log_ratio,
    ratio_interval,
    samples_to_separate,
    wilson_interval,
)
from ropectl.eval.tasks.ruler.results import trial_average
from ropectl.eval.tasks.ruler.spec import RULER_THRESHOLD
from ropectl.report.spec import CONFIDENCE, KEEP, REFERENCE_MIN_SAMPLES, THRESHOLD


@dataclass(frozen=True, kw_only=True)
class LengthRow:
    length: int
    extended: MeanInterval
    base: MeanInterval | None
    ratio: float
    lo: float
    hi: float


@dataclass(frozen=True, kw_only=True)
class PplRow:
    length: int
    base_ppl: float
    extended_ppl: float
    ratio: PairedRatio
    spread: float | None  # sd of the per-document log ratios (per token): what more documents would divide


def kept_tasks(base_rows: Sequence[Any], tasks: Sequence[str], reference: int) -> tuple[list[str], dict[str, str]]:
    """The tasks the base does at the reference length, and why each other one was left out."""
    kept, left = [], {}
    for task in tasks:
        scores = [r.score for r in base_rows if r.task == task and r.length == reference]
        ci = mean_interval(scores, CONFIDENCE)
        if ci.lo >= KEEP:
            kept.append(task)
        else:
            left[task] = (f"the base's score at the reference is {ci.mean:.0%} [{ci.lo:.0%}, {ci.hi:.0%}] (n={ci.n}): "
                          f"its lower bound is below {KEEP:.0%}")
    return kept, left


def per_trial(rows: Sequence[Any], tasks: Sequence[str], length: int) -> dict[int, float]:
    return trial_average({t: {r.trial: r.score for r in rows if r.task == t and r.length == length} for t in tasks})


def length_rows(base_rows: Sequence[Any], ext_rows: Sequence[Any], kept: Sequence[str], reference: int,
                lengths: Sequence[int]) -> tuple[MeanInterval, list[LengthRow]]:
    ref = mean_interval(list(per_trial(base_rows, kept, reference).values()), CONFIDENCE)
    out = []
    for n in lengths:
        ext = mean_interval(list(per_trial(ext_rows, kept, n).values()), CONFIDENCE)
        base_at = per_trial(base_rows, kept, n)
        base = mean_interval(list(base_at.values()), CONFIDENCE) if base_at else None
        ratio, lo, hi = ratio_interval(ext, ref)
        out.append(LengthRow(length=n, extended=ext, base=base, ratio=ratio, lo=lo, hi=hi))
    return ref, out


def effective(rows: Sequence[LengthRow]) -> Effective:
    """NoLiMa's relative rule on the ratio intervals."""
    return effective_length([Point(length=r.length, lo=r.lo, hi=r.hi) for r in rows], THRESHOLD)


def ruler_absolute(rows: Sequence[LengthRow]) -> Effective:
    """RULER's absolute rule (85.6 %) on the extended model's own Wilson intervals, under the same interval rule."""
    return effective_length([Point(length=r.length, lo=r.extended.lo, hi=r.extended.hi) for r in rows],
                            RULER_THRESHOLD)


def samples_to_decide_length(row: LengthRow, ref: MeanInterval) -> int | None:
    """Samples per length at which the same proportions would decide ``row``'s status."""
    def interval(k: int) -> tuple[float, float]:
        a = _projected(row.extended.mean, k)
        b = _projected(ref.mean, max(k, REFERENCE_MIN_SAMPLES))
        return ratio_interval(a, b)[1:]

    return samples_to_decide(interval, THRESHOLD, row.extended.n)


def _projected(mean: float, n: int) -> MeanInterval:
    lo, hi = wilson_interval(mean * n, n, CONFIDENCE)
    return MeanInterval(n, mean, lo, hi)


def reference_difference(base_rows: Sequence[Any], ext_rows: Sequence[Any], kept: Sequence[str],
                         reference: int) -> PairedDiff | None:
    a, b = per_trial(ext_rows, kept, reference), per_trial(base_rows, kept, reference)
    common = sorted(set(a) & set(b))
    return paired_difference([a[i] for i in common], [b[i] for i in common], CONFIDENCE) if common else None


def ppl_rows(base_cells: Sequence[Any], ext_cells: Sequence[Any], lengths: Sequence[int]) -> list[PplRow]:
    """Per length: both models' token-weighted PPL over the documents both have, and their paired ratio."""
    out = []
    for n in lengths:
        base = {c.doc: c for c in base_cells if c.length == n}
        ext = {c.doc: c for c in ext_cells if c.length == n}
        docs = sorted(set(base) & set(ext))
        if not docs:
            continue
        tokens = [base[d].tokens for d in docs]
        ratio = paired_log_ratio([ext[d].nll_sum for d in docs], [base[d].nll_sum for d in docs], tokens, CONFIDENCE)
        logs = [(ext[d].nll_sum - base[d].nll_sum) / base[d].tokens for d in docs]
        total = math.fsum(tokens)
        out.append(PplRow(length=n, base_ppl=math.exp(math.fsum(base[d].nll_sum for d in docs) / total),
                          extended_ppl=math.exp(math.fsum(ext[d].nll_sum for d in docs) / total), ratio=ratio,
                          spread=statistics.stdev(logs) if len(logs) > 1 else None))
    return out


def retained(rows: Sequence[PplRow], max_regression: float) -> bool | None:
    """True: every in-window ratio's upper bound <= 1 + max_regression; False: one's lower bound is above it."""
    limit = 1.0 + max_regression
    if any(r.ratio.lo > limit for r in rows):
        return False
    return True if rows and all(r.ratio.hi <= limit for r in rows) else None


def docs_to_decide(rows: Sequence[PplRow], max_regression: float) -> int | None:
    """Documents at which the observed spread would put each undecided ratio's interval on one side of the limit."""
    limit, needs = 1.0 + max_regression, []
    for r in rows:
        if r.ratio.lo <= limit < r.ratio.hi and r.spread:
            need = samples_to_separate(math.log(limit) - math.log(r.ratio.ratio), r.spread, CONFIDENCE)
            if need is None:
                return None
            needs.append(need)
    return max(needs) if needs else None
