"""LongRoPE's evolutionary search over per-dimension rescale factors, as ask and tell (:class:`Evolution`): no loop
and no model of its own.

After LongRoPE (Ding et al., arXiv 2402.13753, §3.2 and Algorithm 1) and its code, microsoft/LongRoPE
``evolution/algorithms/genetic_base.py`` (``run_genetic_algorithm``) and ``evolution/algorithms/dim_mono.py``
(``DimMonoGeneticAlgorithm.mutate`` / ``crossover``), whose defaults (``default_hyper_params/dim_mono_llama.json``)
are population 64, parents 32, 16 mutations + 16 crossovers per iteration, 40 iterations, step 0.01:

- a candidate is one factor per rotary pair, lambda_i in [1, s] on a 0.01 grid, non-decreasing over pairs (the
  paper's monotone constraint: lower frequencies are interpolated at least as much as higher ones);
- the first population is the seeds (YaRN / NTK / linear factor lists, :func:`seed_factors`) and mutants of them;
- each iteration keeps the ``parents`` best, then refills the population half by mutation, half by crossover;
- a candidate already evaluated is never evaluated again (LongRoPE's ``history`` check).

No torch and no model here: the caller measures each candidate it is asked for (lower is better; None is
infeasible, e.g. an in-window regression; ``inf`` is a pruned trial). Deterministic for a seed and the fitnesses
told, so a caller that records them can rebuild the search. ``ropectl search`` drives it from its Optuna study
(``ropectl.search.evolution``); :func:`evolve` drives it from a plain loop. Mutation and crossover are pure
functions of their parents, the random stream and the history.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Generator, Sequence
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


@dataclass(frozen=True)
class Candidate:
    """One candidate the evolution asks to be measured, and how it was made (seed, mutation, crossover)."""

    factors: Factors
    origin: str


Steps = Generator[tuple[_Index, str], "float | None", None]


class Evolution:
    """LongRoPE's search as ask and tell: :meth:`ask` gives the candidate to measure next (None once the search is
    over), :meth:`tell` its fitness (lower is better; None infeasible, ``inf`` pruned: both rank below every
    finished candidate). A caller that tells the same fitnesses gets the same candidates, which is how a stopped
    search is rebuilt: replay the recorded outcomes, then measure what comes next."""

    def __init__(self, seeds: Sequence[Sequence[float]], factor: float, *, population: int, iterations: int,
                 seed: int, step: float = 0.01, parents: int | None = None) -> None:
        parents = population // 2 if parents is None else parents
        _check(seeds, factor, population, iterations, step, parents)
        self.grid = _Grid(step, int(math.floor((factor - 1.0) / step + 1e-9)))
        self.seen: dict[_Index, float | None] = {}  # LongRoPE's history: every candidate told, with its fitness
        snapped = [self.grid.snap(s) for s in seeds]
        self._steps = _generations(snapped, population, iterations, parents, self.grid.top, random.Random(seed),
                                   self.seen)
        self._pending = next(self._steps, None)

    def ask(self) -> Candidate | None:
        """The next candidate to measure, the same one until it is told."""
        if self._pending is None:
            return None
        idx, origin = self._pending
        return Candidate(tuple(self.grid.value(k) for k in idx), origin)

    def tell(self, fitness: float | None) -> None:
        if self._pending is None:
            raise ValueError("the evolution is over: nothing was asked")
        try:
            self._pending = self._steps.send(fitness)
        except StopIteration:
            self._pending = None


def _generations(seeds: list[_Index], population: int, iterations: int, parents: int, top: int, rng: random.Random,
                 seen: dict[_Index, float | None]) -> Steps:
    """Algorithm 1: the first population, then per iteration the ``parents`` best and their children. Yields each
    new candidate and receives its fitness."""
    pool = yield from _first_population(seeds, population, top, rng, seen)
    for _ in range(iterations):
        kept = sorted(pool, key=lambda idx: _rank_key(seen, idx))[:parents]
        pool = kept + (yield from _children(kept, population - parents, top, rng, seen))


def _measure(idx: _Index, origin: str, seen: dict[_Index, float | None]) -> Steps:
    """Ask for ``idx`` once (a candidate already told is never measured again) and record its fitness."""
    if idx not in seen:
        seen[idx] = yield idx, origin


def _rank_key(seen: dict[_Index, float | None], idx: _Index) -> tuple[bool, float]:
    value = seen.get(idx)
    ok = value is not None and math.isfinite(value)
    return (not ok, value if ok else math.inf)  # type: ignore[return-value]


def state_of(fitness: float | None) -> str:
    """A trial's state from its fitness: infeasible (None), pruned (not finite) or complete."""
    return "infeasible" if fitness is None else ("complete" if math.isfinite(fitness) else "pruned")


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
    (population - parents) evaluations (fewer when mutants repeat, or ``should_stop`` ends it early). The
    :class:`Evolution` driven by a plain loop; ``ropectl search`` drives it through its Optuna study instead."""
    evolution = Evolution(seeds, factor, population=population, iterations=iterations, seed=seed, step=step,
                          parents=parents)
    trials: list[dict[str, Any]] = []
    while (candidate := evolution.ask()) is not None:
        if should_stop is not None and should_stop():
            break
        start = time.perf_counter()
        raw = fitness(candidate.factors)
        value = None if raw is None else float(raw)
        evolution.tell(value)
        state = state_of(value)
        trial = {"number": len(trials), "params": {"long_factor": list(candidate.factors)},
                 "fitness": value if state == "complete" else None, "state": state, "origin": candidate.origin,
                 "lengths": None, "seconds": time.perf_counter() - start}
        trials.append(trial)
        if on_trial is not None:
            on_trial(dict(trial))
    done = [t for t in trials if t["state"] == "complete"]
    if not done:
        return EvolveResult(None, None, trials)
    best = min(done, key=lambda t: (t["fitness"], t["number"]))
    return EvolveResult(tuple(best["params"]["long_factor"]), best["fitness"], trials)


def _first_population(seeds: list[_Index], size: int, top: int, rng: random.Random,
                      seen: dict[_Index, float | None]) -> Generator[tuple[_Index, str], float | None, list[_Index]]:
    """The seeds (each once), then mutants of them in turn (genetic_base: the initial factors and their mutants)."""
    pool: list[_Index] = []
    for s in dict.fromkeys(seeds):
        yield from _measure(s, "seed", seen)
        pool.append(s)
    for i in range(size * _MAX_TRIES):
        if len(pool) >= size:
            break
        child = _mutate(pool[i % len(seeds)], top, rng, seen)
        if child is not None:
            yield from _measure(child, "mutation", seen)
            pool.append(child)
    return pool


def _children(kept: list[_Index], count: int, top: int, rng: random.Random,
              seen: dict[_Index, float | None]) -> Generator[tuple[_Index, str], float | None, list[_Index]]:
    """Half mutants of random parents, half crossovers of random parent pairs (a failed crossover mutates the
    better parent, as genetic_base does)."""
    out: list[_Index] = []
    for j in range(count):
        child, origin = None, "mutation"
        if j >= count // 2 and len(kept) > 1:
            a, b = sorted(rng.sample(range(len(kept)), 2))
            child, origin = _crossover(kept[a], kept[b], rng, seen), "crossover"
            if child is None:
                child, origin = _mutate(kept[a], top, rng, seen), "mutation"
        else:
            child = _mutate(kept[rng.randrange(len(kept))], top, rng, seen)
        if child is not None:
            yield from _measure(child, origin, seen)
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
