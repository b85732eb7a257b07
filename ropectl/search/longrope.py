"""LongRoPE's evolutionary search over per-dimension rescale factors, as a pure function of a fitness callable.

After LongRoPE (Ding et al., arXiv 2402.13753, §3.2 and Algorithm 1) and its code, microsoft/LongRoPE
``evolution/algorithms/genetic_base.py`` (``run_genetic_algorithm``) and ``evolution/algorithms/dim_mono.py``
(``DimMonoGeneticAlgorithm.mutate`` / ``crossover``), whose defaults (``default_hyper_params/dim_mono_llama.json``)
are population 64, parents 32, 16 mutations + 16 crossovers per iteration, 40 iterations, step 0.01:

- a candidate is one factor per rotary pair, lambda_i in [1, s] on a 0.01 grid, non-decreasing over pairs (the
  paper's monotone constraint: lower frequencies are interpolated at least as much as higher ones);
- the first population is the seeds (YaRN / NTK / linear factor lists, :func:`seed_factors`) and mutants of them;
- each iteration keeps the ``parents`` best, then refills the population half by mutation, half by crossover;
- a candidate already evaluated is never evaluated again (LongRoPE's ``history`` check).

No torch and no model here: the caller's fitness builds the rotary module and measures (lower is better; None is
infeasible, e.g. an in-window regression; ``inf`` is a pruned trial). Deterministic for a seed.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ropectl.errors import UsageError

Factors = tuple[float, ...]
_Index = tuple[int, ...]  # a candidate as grid indices: lambda = 1 + index * step (exact, no float drift)
_MAX_TRIES = 20  # LongRoPE's max_crossover_try; also bounds the search for an unseen mutant
_CROSS_P = 0.3  # dim_mono.crossover: each dimension is considered with probability 0.3 ...
_SWAP_P = 0.5  # ... and then takes the second parent's value with probability 0.5


@dataclass(frozen=True)
class EvolveResult:
    """The best feasible candidate (None when none was feasible), its fitness, and every trial in order."""

    best: Factors | None
    best_fitness: float | None
    trials: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class _Grid:
    step: float
    top: int  # the largest index: lambda = factor, floored onto the grid

    def value(self, k: int) -> float:
        return round(1.0 + k * self.step, 10)

    def snap(self, factors: Sequence[float]) -> _Index:
        """Nearest grid point, clipped to [1, factor], then made non-decreasing (running maximum)."""
        out, low = [], 0
        for v in factors:
            k = min(max(int(round((float(v) - 1.0) / self.step)), 0), self.top)
            low = max(low, k)
            out.append(low)
        return tuple(out)


class _Stop(Exception):
    """should_stop() said so before the next evaluation."""


class _Run:
    """The evaluated candidates (LongRoPE's history) and the trial records."""

    def __init__(self, fitness: Callable[[Factors], float | None], grid: _Grid,
                 on_trial: Callable[[dict], None] | None, should_stop: Callable[[], bool] | None) -> None:
        self.fitness, self.grid, self.on_trial, self.should_stop = fitness, grid, on_trial, should_stop
        self.seen: dict[_Index, float | None] = {}
        self.trials: list[dict[str, Any]] = []

    def evaluate(self, idx: _Index, origin: str) -> None:
        if idx in self.seen:
            return
        if self.should_stop is not None and self.should_stop():
            raise _Stop
        factors = tuple(self.grid.value(k) for k in idx)
        start = time.perf_counter()
        raw = self.fitness(factors)
        value = None if raw is None else float(raw)
        self.seen[idx] = value
        state = "infeasible" if value is None else ("complete" if math.isfinite(value) else "pruned")
        trial = {"number": len(self.trials), "params": {"long_factor": list(factors)},
                 "fitness": value if state == "complete" else None, "state": state, "origin": origin,
                 "lengths": None, "seconds": time.perf_counter() - start}
        self.trials.append(trial)
        if self.on_trial is not None:
            self.on_trial(dict(trial))

    def rank_key(self, idx: _Index) -> tuple[bool, float]:
        value = self.seen.get(idx)
        ok = value is not None and math.isfinite(value)
        return (not ok, value if ok else math.inf)  # type: ignore[return-value]

    def result(self) -> EvolveResult:
        done = [t for t in self.trials if t["state"] == "complete"]
        if not done:
            return EvolveResult(None, None, self.trials)
        best = min(done, key=lambda t: (t["fitness"], t["number"]))
        return EvolveResult(tuple(best["params"]["long_factor"]), best["fitness"], self.trials)


def _mutate(parent: _Index, top: int, rng: random.Random, seen: dict[_Index, Any]) -> _Index | None:
    """dim_mono.mutate: every dimension redrawn uniformly between its (new) left and (old) right neighbour, which
    keeps the order by construction; retried until the candidate is new."""
    for _ in range(_MAX_TRIES):
        child = list(parent)
        for d in range(len(child)):
            low = child[d - 1] if d > 0 else 0
            high = child[d + 1] if d + 1 < len(child) else top
            child[d] = rng.randint(low, high)
        out = tuple(child)
        if out not in seen:
            return out
    return None


def _crossover(first: _Index, second: _Index, rng: random.Random, seen: dict[_Index, Any]) -> _Index | None:
    """dim_mono.crossover: starting from the better parent, dimensions take the other parent's value one at a time;
    the first candidate that is non-decreasing and new is the child (None: the caller mutates instead)."""
    if first == second:
        return None
    child = list(first)
    for _ in range(_MAX_TRIES):
        for d in range(len(child)):
            if rng.random() >= _CROSS_P:
                continue
            if rng.random() < _SWAP_P:
                child[d] = second[d]
            out = tuple(child)
            if out not in seen and all(a <= b for a, b in zip(out, out[1:])):
                return out
    return None


def _check(seeds: Sequence[Sequence[float]], factor: float, population: int, iterations: int, step: float,
           parents: int) -> None:
    if not seeds:
        raise UsageError("no seed factors for the longrope search", "seed it from yarn, ntk or linear (seed_factors)")
    if len({len(s) for s in seeds}) != 1 or not seeds[0]:
        raise UsageError("the longrope seeds have different lengths", "give one factor per rotary pair in every seed")
    if not factor > 1 or not step > 0:
        raise UsageError(f"longrope search needs a factor above 1 and a positive step (got {factor:g}, {step:g})",
                         "pass the target length over the trained context as the factor")
    if population < 2 or iterations < 0:
        raise UsageError(f"population {population} / iterations {iterations} cannot evolve",
                         "pass a population of 2 or more and 0 or more iterations")
    if not 1 <= parents < population:
        raise UsageError(f"{parents} parents in a population of {population}", "keep 1 <= parents < population")


def evolve(fitness: Callable[[Factors], float | None], seeds: Sequence[Sequence[float]], factor: float, *,
           population: int, iterations: int, seed: int, step: float = 0.01, parents: int | None = None,
           on_trial: Callable[[dict], None] | None = None,
           should_stop: Callable[[], bool] | None = None) -> EvolveResult:
    """Minimise ``fitness`` over monotone factor lists in [1, factor]; at most population + iterations x
    (population - parents) evaluations (fewer when mutants repeat, or ``should_stop`` ends it early)."""
    parents = population // 2 if parents is None else parents
    _check(seeds, factor, population, iterations, step, parents)
    grid = _Grid(step, int(math.floor((factor - 1.0) / step + 1e-9)))
    rng = random.Random(seed)
    run = _Run(fitness, grid, on_trial, should_stop)
    try:
        pool = _first_population([grid.snap(s) for s in seeds], population, grid.top, rng, run)
        for _ in range(iterations):
            kept = sorted(pool, key=run.rank_key)[:parents]
            pool = kept + _children(kept, population - parents, grid.top, rng, run)
    except _Stop:
        pass
    return run.result()


def _first_population(seeds: list[_Index], size: int, top: int, rng: random.Random, run: _Run) -> list[_Index]:
    """The seeds (each once), then mutants of them in turn (genetic_base: the initial factors and their mutants)."""
    pool: list[_Index] = []
    for s in dict.fromkeys(seeds):
        run.evaluate(s, "seed")
        pool.append(s)
    for i in range(size * _MAX_TRIES):
        if len(pool) >= size:
            break
        child = _mutate(pool[i % len(seeds)], top, rng, run.seen)
        if child is not None:
            run.evaluate(child, "mutation")
            pool.append(child)
    return pool


def _children(kept: list[_Index], count: int, top: int, rng: random.Random, run: _Run) -> list[_Index]:
    """Half mutants of random parents, half crossovers of random parent pairs (a failed crossover mutates the
    better parent, as genetic_base does)."""
    out: list[_Index] = []
    for j in range(count):
        child, origin = None, "mutation"
        if j >= count // 2 and len(kept) > 1:
            a, b = sorted(rng.sample(range(len(kept)), 2))
            child, origin = _crossover(kept[a], kept[b], rng, run.seen), "crossover"
            if child is None:
                child, origin = _mutate(kept[a], top, rng, run.seen), "mutation"
        else:
            child = _mutate(kept[rng.randrange(len(kept))], top, rng, run.seen)
        if child is not None:
            run.evaluate(child, origin)
            out.append(child)
    return out


def seed_factors(method: str, rope: Any, target: int) -> Factors:
    """LongRoPE's factors equivalent to a closed-form method at ``target``: lambda_i = base_inv_freq_i /
    scaled_inv_freq_i, from ropectl's own frequencies. ``rope`` is the model's unscaled RopeParams (trained context
    in max_position_embeddings); the list is not snapped (evolve snaps it onto its grid)."""
    from ropectl.rope.frequencies import base_inv_freq, compute_frequencies
    from ropectl.rope.methods import MethodSpec, apply_method, factor_for_target

    factor = factor_for_target(rope, int(target))
    scaled = apply_method(rope, MethodSpec(method, factor))
    inv = compute_frequencies(scaled, int(target)).inv_freq
    base = base_inv_freq(rope.rope_theta, rope.rotary_dim)
    return tuple(b / s for b, s in zip(base, inv))
