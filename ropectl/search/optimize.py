"""The trials: one Optuna study, one loop, one objective for every space. The space's sampler proposes (TPE or
CMA-ES over a box; LongRoPE's evolution for ``--space longrope``), each trial is measured shortest length first and
Optuna's median pruner stops it there, and the study's storage keeps every trial for ``--resume`` and workers.

A trial is counted once it is measured at least at its first length: pruned and infeasible trials count against
``--trials``. An infeasible trial (in-window PPL above the limit) is recorded as pruned with ``feasible = False``:
it never reaches the target forward, TPE ranks it below every finished trial, CMA-ES leaves it out, the evolution
ranks it last.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ropectl.search.fitness import Measured, measure
from ropectl.search.run import SearchRequest, Setup
from ropectl.search.study import counted


def run_trials(req: SearchRequest, setup: Setup, say: Callable[[str], None]) -> Any:
    """The study after this run's trials: until the space's budget is spent (box: --trials), the space says it is
    finished (the evolution's last candidate), or --budget minutes have passed (after the trial running then)."""
    from optuna.study import MaxTrialsCallback
    from optuna.trial import TrialState

    study, space = setup.study, setup.space
    space.begin(study)
    budget = space.budget(req.loop)
    done = counted(study)
    left = None if budget is None else max(0, budget - done)
    if done:
        say(f"resuming: {done} trials already in the study" + (f", {left} left" if left is not None else ""))
    callbacks = [] if budget is None else [MaxTrialsCallback(budget, states=(TrialState.COMPLETE, TrialState.PRUNED))]
    callbacks.append(lambda study, trial: study.stop() if space.finished(study) else None)
    if left != 0 and not space.finished(study):
        study.optimize(lambda trial: objective(trial, setup), n_trials=left,
                       timeout=req.minutes * 60 if req.minutes else None, callbacks=callbacks, catch=())
    return study


def objective(trial: Any, setup: Setup) -> float:
    """One trial: the point's fitness; pruned (Optuna's pruner, or infeasible in-window) raises TrialPruned."""
    import optuna

    spec = setup.space.suggest(trial)
    if setup.space.labels_trials:  # a spec a user can type; longrope's is its factor lists, already the params
        trial.set_user_attr("spec", spec.label)
    seen = _seen(setup.study, trial)
    if seen is not None:  # a point already measured (a small discrete space repeats): its outcome, no forward
        trial.set_user_attr("repeat_of", seen.number)
        for key, value in seen.user_attrs.items():
            if key not in ("spec", "repeat_of"):
                trial.set_user_attr(key, value)
        return repeat_outcome(seen)

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


def repeat_outcome(seen: Any) -> float:
    """A repeated point's outcome: the first trial's fitness where it completed, pruned where it was pruned. Optuna
    stores a pruned trial's last intermediate value as its value (a log PPL at a shorter length, not a fitness), so
    the state decides, never the value."""
    import optuna
    from optuna.trial import TrialState

    if seen.state != TrialState.COMPLETE or seen.value is None:
        raise optuna.TrialPruned()
    return float(seen.value)


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
