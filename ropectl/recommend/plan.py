"""What ``recommend``'s sweeps will run, before they run: the cells and trials, an estimated time, the sizes a
time budget allows, and the statistical power those sizes buy.

The time model (docs/reference/recommend.md): a forward of n tokens takes a fixed cost plus seconds per FLOP times
``Shape.flops(n)``, a linear term (each weight one multiply-add per token) plus causal attention's quadratic term;
the two constants come from two timed forwards (``ropectl.eval.timing``). Each (method, document) of the PPL
sweep costs one forward at the longest length (a causal forward serves every shorter length of the same rotary
embedding), plus one at the screen length; each task trial one forward at its length (teacher-forced scoring, no
generation). Every candidate is counted as surviving the screen, so the estimate is an upper bound until the
screen has run.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ropectl.eval.stats import min_pairs, samples_to_separate, trials_to_separate_binary
from ropectl.eval.timing import Timing
from ropectl.rope.methods import as_is_name, unscaled_name

# A budget never goes below these: with fewer than 6 documents the PPL ratio never separates (stats.min_pairs), and
# with fewer than 6 trials no paired task difference does.
MIN_DOCS, MIN_SAMPLES = min_pairs(), 6
POWER = 0.8


@dataclass(frozen=True)
class Plan:
    methods: tuple[str, ...]
    lengths: tuple[int, ...]  # the PPL lengths, the screen's among them
    docs: int
    tasks: tuple[str, ...]
    samples: int
    task_lengths: tuple[int, ...]
    screen_at: int | None  # None: no screen (an engine that starts per method)
    ships: str | None = None  # the scaling the checkpoint ships ("yarn x2"): as-is is measured beside none

    @property
    def ppl_cells(self) -> int:
        return len(self.methods) * len(self.lengths) * self.docs

    @property
    def screen_cells(self) -> int:
        return len(self.methods) * self.docs if self.screen_at else 0

    @property
    def trials(self) -> int:
        return len(self.methods) * len(self.tasks) * self.samples * len(self.task_lengths)

    def forwards(self) -> list[tuple[int, int]]:
        """(length, count) of the forwards the sweeps run if no method is screened out."""
        per_method = len(self.methods)
        out = [(self.screen_at, per_method * self.docs)] if self.screen_at else []
        out.append((max(self.lengths), per_method * self.docs))
        return out + [(n, per_method * len(self.tasks) * self.samples) for n in self.task_lengths]

    def without(self, methods: set[str]) -> Plan:
        return replace(self, methods=tuple(m for m in self.methods if m not in methods))


def fit_budget(plan: Plan, timing: Timing, seconds: float) -> Plan:
    """The plan with documents and samples cut (in step, never below MIN_DOCS / MIN_SAMPLES) until its estimate
    fits ``seconds``; the plan itself when it already fits, the smallest when none does."""
    if timing.estimate(plan.forwards()) <= seconds:
        return plan
    smallest = plan
    for step in range(19, -1, -1):  # 95 %, 90 %, ... 0 % of the sizes, floored at the minimums
        k = step / 20
        smallest = replace(plan, docs=max(min(MIN_DOCS, plan.docs), math.floor(plan.docs * k)),
                           samples=max(min(MIN_SAMPLES, plan.samples), math.floor(plan.samples * k)))
        if timing.estimate(smallest.forwards()) <= seconds:
            return smallest
    return smallest


def task_difference(samples: int) -> float | None:
    """The smallest paired task-score difference ``samples`` trials separate at 80 % power, in the best case
    (every trial the two methods disagree on favours one of them); None when no difference can be."""
    for step in range(1, 101):
        delta = step / 100
        needed = trials_to_separate_binary(delta, 0.0, power=POWER)
        if needed is not None and needed <= samples:
            return delta
    return None


def ppl_ratio(docs: int, spread: float) -> float | None:
    """The smallest PPL ratio (>= 1; its inverse likewise) ``docs`` documents separate at 80 % power, given the
    spread (sample sd) of per-document log ratios; None with fewer documents than the PPL rule needs
    (``stats.min_pairs``) or no spread."""
    if docs < min_pairs() or spread <= 0:
        return None
    lo, hi = 0.0, 50.0 * spread
    if (samples_to_separate(hi, spread, power=POWER) or math.inf) > docs:
        return None
    for _ in range(60):  # bisection: samples_to_separate falls as the difference grows
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if (samples_to_separate(mid, spread, power=POWER) or math.inf) > docs else (lo, mid)
    return math.exp(hi)


def spread(cells: Sequence[Any], length: int, reference: str | None = None) -> float | None:
    """The median over methods of the sample sd of per-document, per-token log PPL ratios against ``reference``
    at ``length`` (the unscaled model by default): what the paired PPL comparison divides by (recommend.compare)."""
    reference = reference or unscaled_name()
    at = [c for c in cells if c.length == length]
    ref = {c.doc: c.nll_sum / c.tokens for c in at if c.method == reference}
    sds = []
    for method in sorted({c.method for c in at} - {reference}):
        diffs = [c.nll_sum / c.tokens - ref[c.doc] for c in at if c.method == method and c.doc in ref]
        if len(diffs) >= 2:
            sds.append(statistics.stdev(diffs))
    return statistics.median(sds) if sds else None


def minutes(seconds: float) -> str:
    if seconds >= 5400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min" if seconds >= 600 else f"{seconds / 60:.1f} min"


def plan_lines(plan: Plan, timing: Timing | None, base: Plan | None = None, budget_s: float | None = None
               ) -> list[str]:
    """The plan as printed before the sweeps: counts, the estimate and what it rests on, the budget's cuts, and
    the task trials' power. ``base``: the generic sizes the budget cut from."""
    from ropectl.runtime.lengths import length_label as label

    m, at = len(plan.methods), ", ".join(label(n) for n in plan.lengths)
    screen = (f"a screen of {plan.screen_cells} cells ({m} methods x {plan.docs} documents at "
              f"{label(plan.screen_at)}), then " if plan.screen_at else "")
    lines = [f"plan: {screen}up to {plan.ppl_cells} PPL cells ({m} x {plan.docs} documents x {at}), then up to "
             f"{plan.trials} task trials ({m} x {len(plan.tasks)} tasks x {plan.samples} samples at "
             f"{', '.join(label(n) for n in plan.task_lengths)}); methods: {', '.join(plan.methods)}"]
    lines.append(reference_line(plan.ships))
    if base is not None and (base.docs, base.samples) != (plan.docs, plan.samples):
        lines.append(f"budget {minutes(budget_s or 0)}: {plan.docs} documents (of {base.docs}), {plan.samples} "
                     f"samples per task (of {base.samples})")
    if timing is None:
        lines.append("estimate: none (no timed forward with this engine)")
    else:
        eta = timing.estimate(plan.forwards())
        lines.append(f"estimate: up to {minutes(eta)} (forwards of {label(timing.tokens)} and {timing.short} tokens "
                     f"took {timing.seconds:.2f} s and {timing.short_s:.2f} s; a forward of n tokens: a fixed cost plus "
                     "time per FLOP x (2 x weights x n + 2 x layers x heads x head size x n^2); every method counted "
                     "as passing the screen)")
        if budget_s is not None and eta > budget_s:
            lines.append(f"warning: the smallest sizes ({plan.docs} documents, {plan.samples} samples) need more "
                         f"than the budget of {minutes(budget_s)}")
    delta = task_difference(plan.samples)
    lines.append(f"power: {plan.samples} trials per task separate a task-score difference of {delta:.0%} or more at "
                 "80 % power at best (every disagreeing trial favouring one method)" if delta else
                 f"power: {plan.samples} trials per task cannot separate any task-score difference at 95 % (at least "
                 f"{MIN_SAMPLES} are needed)")
    return lines


def reference_line(ships: str | None) -> str:
    """The two references, or why there is one: ``none`` is the unscaled base, ``as-is`` the checkpoint unchanged."""
    none, kept = unscaled_name(), as_is_name()
    if ships:
        return (f"references: {none} (the unscaled base) and {kept} (the checkpoint unchanged: it ships {ships}), "
                "each measured")
    return f"references: {none}; the checkpoint ships no scaling, so {kept} is {none} (measured once, as {none})"


def screen_lines(plan: Plan, spread: float | None, left: Plan, timing: Timing | None) -> list[str]:
    """After the screen: the PPL power its spread between documents gives, and the estimate for what is left."""
    from ropectl.runtime.lengths import length_label as label

    lines = []
    ratio = ppl_ratio(plan.docs, spread) if spread else None
    if plan.docs < min_pairs():
        lines.append(f"power: {plan.docs} documents are fewer than the {min_pairs()} the PPL ratio needs to separate "
                     "on its own: only the tasks can separate the methods")
    elif ratio is not None and spread is not None:
        lines.append(f"power: {plan.docs} documents separate a PPL ratio of {ratio:.3f} (or 1/{ratio:.3f}) at 80 % "
                     f"power, given the screen's spread between documents (sd {spread:.4f} of per-token log "
                     f"ratios at {label(plan.screen_at or 0)})")
    if timing is not None:
        rest = replace(left, screen_at=None)
        lines.append(f"estimate: {len(left.methods)} of {len(plan.methods)} methods pass the screen; about "
                     f"{minutes(timing.estimate(rest.forwards()))} left")
    return lines
