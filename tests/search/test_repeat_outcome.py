"""A point the study already measured is not measured again: it takes the first trial's outcome. A pruned first
trial must give a pruned repeat, although Optuna stores the pruned trial's last intermediate value as its value."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

from ropectl.search.optimize import repeat_outcome


def _first(state: TrialState) -> optuna.trial.FrozenTrial:
    study = optuna.create_study()
    trial = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    trial.report(0.5, 0)  # a log PPL at the first length: lower than any fitness at the target
    study.tell(trial, 3.0 if state == TrialState.COMPLETE else None, state=state)
    return study.trials[0]


def test_a_repeat_of_a_pruned_point_is_pruned() -> None:
    first = _first(TrialState.PRUNED)
    assert first.value == 0.5  # what Optuna stores: the reason the state, not the value, must decide
    with pytest.raises(optuna.TrialPruned):
        repeat_outcome(first)


def test_a_repeat_of_a_finished_point_has_its_fitness() -> None:
    assert repeat_outcome(_first(TrialState.COMPLETE)) == 3.0
