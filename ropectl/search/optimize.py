"""The trials: stage 1 through Optuna (one trial = one point of the space, measured shortest length first and
pruned there), stage 2 (``--space longrope``) through the evolutionary search of ``ropectl.search.longrope``.

A trial is counted once it is measured at least at its first length: pruned and infeasible trials count against
``--trials``. An infeasible trial (in-window PPL above the limit) is recorded as pruned with ``feasible = False``:
it never reaches the target forward, TPE ranks it below every finished trial, CMA-ES leaves it out.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from ropectl.search.fitness import Measured, measure
from ropectl.search.run import DEFAULT_BUDGET, SearchRequest, Setup
from ropectl.search.study import counted, suggest


def run_stage1(req: SearchRequest, setup: Setup, say: Callable[[str], None]) -> Any:
    """The study after this run's trials."""
    study = setup.study
    budget = req.trials if req.trials is not None else (None if req.minutes else DEFAULT_BUDGET)
    if not study.trials:
        study.enqueue_trial(setup.space.start())  # the closed form itself is the first point
    done = counted(study)
    left = None if budget is None else max(0, budget - done)
    if done:
        say(f"resuming: {done} trials already in the study" + (f", {left} left" if left is not None else ""))
    callbacks = []
    if budget is not None:
        from optuna.study import MaxTrialsCallback
        from optuna.trial import TrialState

        callbacks.append(MaxTrialsCallback(budget, states=(TrialState.COMPLETE, TrialState.PRUNED)))
    if left != 0:
        study.optimize(lambda trial: objective(trial, setup), n_trials=left,
                       timeout=req.minutes * 60 if req.minutes else None, callbacks=callbacks, catch=())
    return study


def objective(trial: Any, setup: Setup) -> float:
    """One trial: the point's fitness; pruned (Optuna's pruner, or infeasible in-window) raises TrialPruned."""
    import optuna

    spec = setup.space.spec(suggest(trial, setup.space))
    trial.set_user_attr("spec", spec.label)
    seen = _seen(setup.study, trial)
    if seen is not None:  # a point already measured (a small discrete space repeats): its outcome, no forward
        trial.set_user_attr("repeat_of", seen.number)
        for key, value in seen.user_attrs.items():
            if key not in ("spec", "repeat_of"):
                trial.set_user_attr(key, value)
        if seen.value is None:
            raise optuna.TrialPruned()
        return float(seen.value)

    def on_length(step: int, value: float) -> None:
        trial.set_user_attr("lengths", list(setup.plan.lengths[:step + 1]))
        trial.report(value, step)
        if trial.should_prune():
            trial.set_user_attr("pruned_at", setup.plan.lengths[step])
            raise optuna.TrialPruned()

    m = measure(setup.ev, spec, setup.docs, setup.needles if setup.plan.answer_loss else [], setup.plan, on_length)
    _record(trial, m, setup)
    if not m.feasible:
        raise optuna.TrialPruned()
    value = m.fitness(setup.plan.target, setup.plan.answer_loss)
    assert value is not None
    return value


def _seen(study: Any, trial: Any) -> Any | None:
    """A finished or pruned trial of the study at the same point (the measurements are deterministic)."""
    from optuna.trial import TrialState

    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
        if t.number != trial.number and t.params == trial.params:
            return t
    return None


def _record(trial: Any, m: Measured, setup: Setup) -> None:
    plan = setup.plan
    trial.set_user_attr("feasible", m.feasible)
    trial.set_user_attr("lengths", list(plan.lengths if m.feasible else plan.lengths[:1]))
    for key, value in (("log_ppl_inside", m.log_ppl(plan.trained)), ("log_ppl_target", m.log_ppl(plan.target)),
                       ("answer_nll", m.answer), ("niah_accuracy", m.accuracy)):
        if value is not None:
            trial.set_user_attr(key, float(value))


def best_trial(study: Any) -> Any | None:
    """The finished trial with the lowest fitness (finished means feasible), or None."""
    from optuna.trial import TrialState

    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if t.value is not None]
    return min(done, key=lambda t: (t.value, t.number)) if done else None


def run_stage2(req: SearchRequest, setup: Setup, seeds: list[tuple[float, ...]], say: Callable[[str], None]
               ) -> tuple[list[dict[str, Any]], tuple[float, ...] | None]:
    """LongRoPE's evolutionary search over per-dimension long factors (arXiv 2402.13753, Alg. 1), seeded from
    ``seeds``; fitness as stage 1 (None for an infeasible candidate)."""
    from ropectl.search.longrope import evolve

    started = time.monotonic()
    factor = setup.space.factor
    finished: list[dict[int, float]] = []  # log PPL per length step of each candidate measured to the end

    def fitness(factors: tuple[float, ...]) -> float | None:
        values: dict[int, float] = {}
        prune = median_pruner(finished, len(setup.plan.lengths) - 1)

        def on_length(step: int, value: float) -> None:
            values[step] = value
            prune(step, value)

        try:
            m = measure(setup.ev, longrope_spec(factors, factor, setup), setup.docs,
                        setup.needles if setup.plan.answer_loss else [], setup.plan, on_length)
        except CandidatePruned:
            return math.inf  # evolve records a non-finite fitness as pruned
        if m.feasible:
            finished.append(values)
        return m.fitness(setup.plan.target, setup.plan.answer_loss)

    def should_stop() -> bool:
        return req.minutes is not None and time.monotonic() - started > req.minutes * 60

    result = evolve(fitness, seeds, factor, population=req.population, iterations=req.iterations, seed=req.seed,
                    should_stop=should_stop)
    say(f"stage 2: {len(result.trials)} candidates, best fitness {result.best_fitness:.4f}")
    best = result.best if result.best and math.isfinite(result.best_fitness) else None
    return list(result.trials), best


class CandidatePruned(Exception):
    """A stage-2 candidate stopped at a pruning length."""


def median_pruner(finished: list[dict[int, float]], last: int, startup: int = 3) -> Callable[[int, float], None]:
    """Stage 1's pruner (Optuna's MedianPruner, 3 start-up trials) for stage 2: at a length before the target (step
    < ``last``), a candidate whose log PPL is above the median of the finished candidates' at that step stops there,
    once ``startup`` candidates have finished. LongRoPE scores every candidate in full; this is the CPU's shortcut."""
    import statistics

    def on_length(step: int, value: float) -> None:
        seen = [f[step] for f in finished if step in f]
        if step < last and len(seen) >= startup and value > statistics.median(seen):
            raise CandidatePruned(step)

    return on_length


def longrope_spec(long_factor: tuple[float, ...], factor: float, setup: Setup) -> Any:
    """A longrope spec: the searched long factors, the model's own short factors (ones)."""
    from ropectl.rope.methods import MethodSpec

    ones = [1.0] * len(long_factor)
    long = [round(x, 4) for x in long_factor]
    return MethodSpec(setup.space.method, round(factor, 6), (("short_factor", ones), ("long_factor", long)))
