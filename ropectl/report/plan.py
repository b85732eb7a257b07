"""What ``report`` will run, before it runs: the trials and forwards, their minutes from two timed forwards
(``ropectl.eval.timing``, the time model ``recommend`` uses), the samples a budget allows, and what those samples can
and cannot decide.

Every candidate task is counted as kept by the screen at the reference length, so the estimate is an upper bound
until the screen has run (``recommend``'s plan does the same with its methods).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ropectl.eval.stats import MeanInterval, ratio_interval, wilson_interval
from ropectl.eval.timing import Timing
from ropectl.recommend.plan import minutes
from ropectl.report.spec import CONFIDENCE, REFERENCE_MIN_SAMPLES, THRESHOLD


@dataclass(frozen=True, kw_only=True)
class Plan:
    tasks: tuple[str, ...]  # the candidates (all counted as kept)
    reference: int
    lengths: tuple[int, ...]
    samples: int
    docs: int
    ppl_lengths: tuple[int, ...]

    @property
    def reference_samples(self) -> int:
        return max(self.samples, REFERENCE_MIN_SAMPLES)

    def forwards(self) -> list[tuple[int, int]]:
        """(length, count): both models at the reference, the extended one at every length (a trial costs one
        forward of its length), both on every document at the longest PPL length (one forward serves the shorter
        cuts)."""
        tasks = len(self.tasks)
        out = [(self.reference, 2 * tasks * self.reference_samples)]
        out += [(n, tasks * self.samples) for n in self.lengths]
        return out + [(max(self.ppl_lengths), 2 * self.docs)]


def fit_budget(plan: Plan, timing: Timing, seconds: float) -> Plan | None:
    """The plan with the most samples (up to its own) whose estimate fits ``seconds``; None when one sample per
    length does not."""
    best = None
    lo, hi = 1, plan.samples
    while lo <= hi:  # the estimate grows with the samples: bisect on them
        mid = (lo + hi) // 2
        if timing.estimate(replace(plan, samples=mid).forwards()) <= seconds:
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return None if best is None else replace(plan, samples=best)


def minimum_minutes(plan: Plan, timing: Timing) -> float:
    return timing.estimate(replace(plan, samples=1).forwards()) / 60


def best_ratio_lower(samples: int, reference_samples: int) -> float:
    """The highest lower bound the score ratio can have on ``samples`` trials: every trial right at the length and at
    the reference."""
    length = _perfect(samples)
    return ratio_interval(length, _perfect(reference_samples))[1]


def fewest_to_count(reference_samples: int) -> int | None:
    """The fewest samples per length at which a perfect score can count (lower bound >= THRESHOLD)."""
    return next((k for k in range(1, 10_001) if best_ratio_lower(k, max(k, reference_samples)) >= THRESHOLD), None)


def _perfect(n: int) -> MeanInterval:
    lo, hi = wilson_interval(n, n, CONFIDENCE)
    return MeanInterval(n, 1.0, lo, hi)


def decides_lines(plan: Plan) -> list[str]:
    """What ``plan.samples`` trials per length can and cannot decide."""
    k, ref = plan.samples, plan.reference_samples
    best = best_ratio_lower(k, ref)
    lines = []
    if best >= THRESHOLD:
        lines.append(f"decides: {k} samples per length let a length count (score ratio's lower bound >= "
                     f"{THRESHOLD:.0%}) when the extended model keeps nearly all of the base's score: every trial "
                     f"right gives a lower bound of {best:.3f}")
    else:
        need = fewest_to_count(ref)
        lines.append(f"cannot decide 'reached': with {k} samples per length the best lower bound of the score ratio "
                     f"(every trial right) is {best:.3f} < {THRESHOLD:.0%}; at least {need} samples per length are "
                     "needed; a length can still be shown to fail (upper bound below the threshold)")
    lines.append(f"retention: {plan.docs} documents, the paired PPL ratio's t interval on {plan.docs - 1} df")
    return lines


def plan_lines(plan: Plan, timing: Timing | None, budget_min: float | None, asked: int) -> list[str]:
    from ropectl.runtime.lengths import length_label as label

    tasks = len(plan.tasks)
    lines = [f"plan: both models, up to {tasks} tasks x {plan.reference_samples} samples at the reference length "
             f"{label(plan.reference)}, then x {plan.samples} samples at {', '.join(label(n) for n in plan.lengths)}; "
             f"PPL on {plan.docs} documents at {', '.join(label(n) for n in plan.ppl_lengths)}"]
    if budget_min is not None and plan.samples < asked:
        lines.append(f"budget {minutes(budget_min * 60)}: {plan.samples} samples per length (of {asked})")
    if timing is None:
        lines.append("estimate: none (no timed forward with this engine)")
    else:
        lines.append(f"estimate: up to {minutes(timing.estimate(plan.forwards()))} (forwards of "
                     f"{label(timing.tokens)} and {timing.short} tokens took {timing.seconds:.2f} s and "
                     f"{timing.short_s:.2f} s; every candidate task counted as kept)")
    return lines + decides_lines(plan)
