"""LongRoPE's evolutionary search (ropectl.search.longrope) on synthetic fitnesses whose optimum is known."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ropectl.errors import RopectlError
from ropectl.search.longrope import Evolution, EvolveResult, evolve, seed_factors

# A fixed monotone optimum in [1, 4], on the 0.01 grid, written out by hand (not produced by the code under test).
OPTIMUM = (1.0, 1.06, 1.24, 1.55, 1.98, 2.53, 3.2, 4.0)


def distance(f: tuple[float, ...]) -> float:
    return math.sqrt(sum((a - b) ** 2 for a, b in zip(f, OPTIMUM)))


def is_candidate(f: tuple[float, ...], factor: float) -> bool:
    on_grid = all(abs(v * 100 - round(v * 100)) < 1e-6 for v in f)
    return on_grid and all(1.0 <= v <= factor + 1e-9 for v in f) and all(a <= b for a, b in zip(f, f[1:]))


def test_converges_to_a_known_optimum() -> None:
    seeds = [(1.0,) * 8, (4.0,) * 8]  # "no scaling" and "linear 4x": both far from the optimum
    start = min(distance(s) for s in seeds)
    result = evolve(distance, seeds, 4.0, population=32, iterations=40, seed=0)
    assert result.best is not None and result.best_fitness == pytest.approx(distance(result.best))
    assert max(abs(a - b) for a, b in zip(result.best, OPTIMUM)) <= 0.15  # each factor within 0.15 of the optimum
    assert result.best_fitness < start / 10
    # every trial is an evaluation: the first population plus (population - parents) per iteration at most
    assert len(result.trials) <= 32 + 40 * 16


def test_a_seed_at_the_optimum_is_kept() -> None:
    result = evolve(distance, [OPTIMUM], 4.0, population=8, iterations=5, seed=3)
    assert result.best == OPTIMUM and result.best_fitness == 0.0


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), factor=st.sampled_from([1.5, 2.0, 4.0, 7.3]),
       raw=st.lists(st.floats(0.0, 9.0), min_size=1, max_size=6))
def test_every_candidate_is_monotone_on_grid_and_in_bounds(seed: int, factor: float, raw: list[float]) -> None:
    seen: list[tuple[float, ...]] = []

    def fitness(f: tuple[float, ...]) -> float | None:
        seen.append(f)
        return None if sum(f) % 3 < 1 else sum(f)  # some candidates infeasible

    result = evolve(fitness, [tuple(raw), tuple(reversed(raw))], factor, population=6, iterations=4, seed=seed)
    assert seen and all(is_candidate(f, factor) for f in seen)
    assert len(set(seen)) == len(seen)  # a candidate is evaluated once
    assert [tuple(t["params"]["long_factor"]) for t in result.trials] == seen


def test_deterministic_for_a_seed() -> None:
    def run(seed: int) -> EvolveResult:
        return evolve(distance, [(1.0,) * 8], 4.0, population=10, iterations=6, seed=seed)

    a, b, c = run(7), run(7), run(8)
    assert [t["params"] for t in a.trials] == [t["params"] for t in b.trials]
    assert a.best == b.best
    assert [t["params"] for t in a.trials] != [t["params"] for t in c.trials]


def test_infeasible_and_pruned_never_win() -> None:
    def fitness(f: tuple[float, ...]) -> float | None:
        d = distance(f)
        if f[-1] > 3.0:
            return None  # infeasible (the in-window constraint, say), although closer to the optimum
        return math.inf if f[0] > 1.5 else d  # pruned

    result = evolve(fitness, [(1.0,) * 8, (4.0,) * 8], 4.0, population=12, iterations=8, seed=1)
    states = {t["state"] for t in result.trials}
    assert {"infeasible", "complete"} <= states
    assert result.best is not None and result.best[-1] <= 3.0 and result.best[0] <= 1.5
    feasible = [t["fitness"] for t in result.trials if t["state"] == "complete"]
    assert result.best_fitness == min(feasible)
    assert all(t["fitness"] is None for t in result.trials if t["state"] != "complete")


def test_nothing_feasible_returns_no_best() -> None:
    result = evolve(lambda f: None, [(1.0, 2.0)], 2.0, population=4, iterations=2, seed=0)
    assert result.best is None and result.best_fitness is None and result.trials


def test_on_trial_and_should_stop() -> None:
    reported: list[dict] = []
    result = evolve(distance, [(1.0,) * 8], 4.0, population=10, iterations=10, seed=0, on_trial=reported.append,
                    should_stop=lambda: len(reported) >= 5)
    assert len(result.trials) == 5 and [t["number"] for t in reported] == [0, 1, 2, 3, 4]
    assert {"number", "params", "fitness", "state", "lengths", "seconds"} <= set(reported[0])


@pytest.mark.parametrize("kwargs", [dict(population=1, iterations=3), dict(population=4, iterations=-1),
                                    dict(population=4, iterations=1, parents=4)])
def test_bad_settings_are_refused(kwargs: dict) -> None:
    with pytest.raises(RopectlError):
        evolve(distance, [(1.0,) * 8], 4.0, seed=0, **kwargs)
    with pytest.raises(RopectlError):
        evolve(distance, [], 4.0, population=4, iterations=1, seed=0)


def test_seed_factors_match_closed_forms() -> None:
    from ropectl.rope.params import RopeParams

    rope = RopeParams("default", 10000.0, 16, 256)
    d = 16
    # linear: every pair interpolated by s; NTK: theta' = theta * s^(d/(d-2)), so lambda_i = s^(2i/(d-2))
    assert seed_factors("linear", rope, 1024) == pytest.approx((4.0,) * 8, abs=1e-9)
    ntk = seed_factors("ntk", rope, 1024)
    assert ntk == pytest.approx([4.0 ** (2 * i / (d - 2)) for i in range(8)], rel=1e-9)
    yarn = seed_factors("yarn", rope, 1024)
    assert yarn[0] == pytest.approx(1.0) and yarn[-1] == pytest.approx(4.0)  # extrapolated / interpolated ends
    assert all(a <= b + 1e-12 for a, b in zip(yarn, yarn[1:]))


def test_told_the_same_outcomes_a_new_evolution_goes_on_as_the_first() -> None:
    """Ask and tell: an evolution rebuilt by telling it the recorded outcomes of a stopped one (what a resumed
    study does) asks next for what the uninterrupted evolution asked; the uninterrupted run is the plain loop."""
    seeds = [(1.0,) * 8, (4.0,) * 8]
    whole = evolve(distance, seeds, 4.0, population=8, iterations=3, seed=5)
    recorded = {tuple(t["params"]["long_factor"]): t["fitness"] for t in whole.trials[:11]}  # into generation 2

    rebuilt = Evolution(seeds, 4.0, population=8, iterations=3, seed=5)
    asked = []
    while (candidate := rebuilt.ask()) is not None:
        asked.append(candidate.factors)
        fitness = recorded.get(candidate.factors)
        rebuilt.tell(distance(candidate.factors) if fitness is None else fitness)
    assert asked == [tuple(t["params"]["long_factor"]) for t in whole.trials]
    assert rebuilt.ask() is None and len(asked) > 11


def test_ask_repeats_until_told() -> None:
    evolution = Evolution([(1.0, 2.0)], 2.0, population=4, iterations=1, seed=0)
    first = evolution.ask()
    assert first is not None and evolution.ask() == first and first.origin == "seed"
    evolution.tell(1.0)
    assert evolution.ask() != first
