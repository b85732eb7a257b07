"""LongRoPE's evolution as an Optuna study's sampler (ropectl.search.evolution), on a synthetic fitness whose
outcomes are known: the study asks for the candidates the plain loop (``longrope.evolve``) asks for, pruned and
infeasible trials included, and a study stopped midway and reopened with a new sampler goes on as if never
stopped."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from ropectl.search.evolution import FactorSpace
from ropectl.search.longrope import evolve
from ropectl.search.loop import LoopSettings
from ropectl.search.spaces import build_space

optuna = pytest.importorskip("optuna")
OPTIMUM = (1.0, 1.06, 1.24, 1.55, 1.98, 2.53, 3.2, 4.0)  # written out by hand, monotone, on the 0.01 grid
SEEDS = ((1.0,) * 8, (4.0,) * 8, (1.0, 1.0, 1.5, 1.5, 2.0, 2.0, 3.5, 3.5))
LOOP = LoopSettings(population=8, iterations=3, seed=4)
optuna.logging.set_verbosity(optuna.logging.WARNING)


def distance(f: tuple[float, ...]) -> float:
    return math.sqrt(sum((a - b) ** 2 for a, b in zip(f, OPTIMUM)))


def outcome(f: tuple[float, ...]) -> float | None:
    """None: infeasible (the last pair above 3.95); inf: pruned (the second above 1.3); else the distance."""
    return None if f[-1] > 3.95 else (math.inf if f[1] > 1.3 else distance(f))


def space() -> FactorSpace:
    built = build_space("longrope", 4.0)
    assert isinstance(built, FactorSpace)
    return replace(built, seeds=tuple((str(i), s) for i, s in enumerate(SEEDS)))


def objective(trial: optuna.Trial, factors: FactorSpace, stop_at: int | None = None) -> float:
    spec = factors.suggest(trial)
    if trial.number == stop_at:
        raise KeyboardInterrupt
    f = tuple(dict(spec.options)["long_factor"])
    value = outcome(f)
    if value is None:
        trial.set_user_attr("feasible", False)
        raise optuna.TrialPruned()
    if math.isinf(value):
        trial.report(distance(f) / 100, 0)  # Optuna keeps this as the pruned trial's value: it must not rank it
        raise optuna.TrialPruned()
    return value


def run(study: optuna.Study, factors: FactorSpace, stop_at: int | None = None) -> None:
    if not factors.finished(study):
        study.optimize(lambda t: objective(t, factors, stop_at), catch=(),
                       callbacks=[lambda s, t: s.stop() if factors.finished(s) else None])


def asked(study: optuna.Study, factors: FactorSpace) -> list[tuple[float, ...]]:
    done = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    return [tuple(factors.row_params(t.params)["long_factor"]) for t in study.get_trials(states=done)]


def test_the_study_asks_what_the_plain_loop_asks() -> None:
    factors = space()
    study = optuna.create_study(sampler=factors.sampler(LOOP))
    run(study, factors)
    plain = evolve(outcome, SEEDS, 4.0, population=8, iterations=3, seed=4)
    assert asked(study, factors) == [tuple(t["params"]["long_factor"]) for t in plain.trials]
    pruned = [t for t in study.trials if t.state == optuna.trial.TrialState.PRUNED]
    assert any(t.value is not None for t in pruned) and any(t.user_attrs.get("feasible") is False for t in pruned)
    best = min((t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE), key=lambda t: t.value)
    assert tuple(factors.row_params(best.params)["long_factor"]) == plain.best


def test_a_study_stopped_midway_goes_on_with_a_new_sampler() -> None:
    factors, storage = space(), optuna.storages.InMemoryStorage()
    whole = optuna.create_study(sampler=factors.sampler(LOOP))
    run(whole, factors)
    stopped = optuna.create_study(storage=storage, study_name="s", sampler=factors.sampler(LOOP))
    with pytest.raises(KeyboardInterrupt):
        run(stopped, factors, stop_at=11)  # the first population is 8: inside the second generation
    reopened = optuna.create_study(storage=storage, study_name="s", load_if_exists=True, sampler=factors.sampler(LOOP))
    run(reopened, factors)
    assert asked(reopened, factors) == asked(whole, factors)
    assert [t.state for t in reopened.trials].count(optuna.trial.TrialState.FAIL) == 1
