"""Stage 2 (``--space longrope``): LongRoPE's per-dimension factors, searched by its evolution inside the same Optuna
study, pruner and loop as stage 1.

The evolution (``ropectl.search.longrope.Evolution``) is the study's sampler: each trial's parameters are the next
candidate the evolution asks for, one ``long_factor_I`` per rotary pair, so the study holds every candidate's
factors and outcome. The sampler rebuilds the evolution by telling it the outcomes of the study's finished trials
in the order it asks for them (a candidate is never asked twice, so its factors identify its trial): a study
resumed from ``--storage`` or ``--resume`` goes on with the candidate an uninterrupted run would measure next.
The evolution's random stream always follows ``--seed``, even with ``--storage``: the candidates are its
decisions, and workers sharing the study replay the same evolution rather than propose other points.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ropectl.rope.methods import MethodSpec
from ropectl.search.longrope import Candidate, Evolution, Factors
from ropectl.search.loop import LoopSettings

FACTORS = "longrope-factors.json"  # the found factors, named by the spec every command takes (file=)
POPULATION, ITERATIONS = 8, 4  # the command's defaults (LongRoPE's own are 64 and 40: docs/reference/search-longrope.md)
_NAME = "long_factor"


@dataclass(frozen=True)
class FactorSpace:
    """One rescale factor per rotary pair in [1, factor], seeded from the closed forms' (``seeds``, set by
    :meth:`at` once the model's RoPE is known)."""

    name: str
    method: str  # the registry method the result is written as
    factor: float  # target / trained
    seeds: tuple[tuple[str, Factors], ...] = ()
    takes = ("--population", "--iterations")  # the options that size the loop: the evolution's
    proposes = "LongRoPE's evolution proposes its candidates, sized by --population and --iterations"
    labels_trials = False  # a candidate's spec would spell its factor lists out again: the params are they
    gguf_refusal = ("a longrope search writes per-dimension factors, which a GGUF cannot carry (ropectl's GGUF patch "
                    "copies tensors unchanged and llama.cpp has no longrope metadata)",
                    "search the Hugging Face checkpoint, or use --space yarn or ntk on the GGUF")  # (problem, fix)

    @property
    def bounds(self) -> tuple[()]:
        return ()  # no box of named options

    def describe(self) -> list[dict[str, Any]]:
        return []

    def at(self, rope: Any, target: int) -> FactorSpace:
        """This space on a model: the seeds are YaRN's, NTK's and linear's factors at the target (LongRoPE's)."""
        from ropectl.search.longrope import seed_factors

        seeds = tuple((f"{m} (target {target})", seed_factors(m, rope, target)) for m in seed_methods())
        return replace(self, seeds=seeds)

    def checks(self) -> tuple[MethodSpec, ...]:
        return ()  # a candidate's factors are checked when the rotary module is built

    def identity(self, loop: LoopSettings) -> dict[str, Any]:
        """The evolution's settings: another population replays into other candidates."""
        return {"population": _population(loop), "iterations": _iterations(loop)}

    def sampler_name(self, loop: LoopSettings) -> str:
        return "evolution"

    def sampler(self, loop: LoopSettings) -> Any:
        seeds = [s for _, s in self.seeds]
        return evolution_sampler(lambda: Evolution(seeds, self.factor, population=_population(loop),
                                                  iterations=_iterations(loop), seed=loop.seed),
                                self._names(), self.factor)

    def planned(self, loop: LoopSettings) -> int:
        """At most the first population plus (population - parents) per iteration."""
        population = _population(loop)
        return population + _iterations(loop) * (population - population // 2)

    def budget(self, loop: LoopSettings) -> int | None:
        return None  # the evolution ends itself (``finished``); --budget minutes may end it sooner

    def begin(self, study: Any) -> None:
        """Nothing to enqueue: the seeds are the evolution's first candidates."""

    def finished(self, study: Any) -> bool:
        return study.sampler.next(study) is None

    def suggest(self, trial: Any) -> MethodSpec:
        values = [trial.suggest_float(n, 1.0, self.factor) for n in self._names()]
        asked = trial.study.sampler.next(trial.study)
        if asked is not None:
            trial.set_user_attr("origin", asked.origin)
        return self.spec_of(dict(zip(self._names(), values, strict=True)))

    def spec_of(self, params: Mapping[str, float]) -> MethodSpec:
        """The longrope spec of a trial: its long factors, the model's own short factors (ones)."""
        long = [round(x, 4) for x in self.row_params(params)[_NAME]]
        return MethodSpec(self.method, round(self.factor, 6), (("short_factor", [1.0] * len(long)),
                                                               ("long_factor", long)))

    def row_params(self, params: Mapping[str, float]) -> dict[str, Any]:
        """A trial's parameters as the factor list (``{"long_factor": [...]}``), in pair order."""
        return {_NAME: [float(params[n]) for n in _names(len(params))]}

    def ship(self, spec: MethodSpec, out: Path) -> MethodSpec:
        """The found factors written as OUT/longrope-factors.json, which the spec names (``longrope:F,file=...``)."""
        from ropectl.io.files import atomic_write_text
        from ropectl.output import dumps

        path = out / FACTORS
        atomic_write_text(path, dumps(dict(spec.options), indent=2) + "\n")
        return replace(spec, file=str(path))

    def _names(self) -> list[str]:
        return _names(len(self.seeds[0][1]))


def seed_methods() -> tuple[str, ...]:
    """The closed forms whose per-pair factors seed the evolution (LongRoPE seeds from PI, NTK and YaRN)."""
    from ropectl.rope.methods import METHODS

    return tuple(n for n, m in METHODS.items() if m.search_seed)


def _names(pairs: int) -> list[str]:
    return [f"{_NAME}_{i}" for i in range(pairs)]


def _population(loop: LoopSettings) -> int:
    return POPULATION if loop.population is None else loop.population


def _iterations(loop: LoopSettings) -> int:
    return ITERATIONS if loop.iterations is None else loop.iterations


def _key(factors: Any) -> tuple[float, ...]:
    return tuple(round(float(v), 6) for v in factors)


def evolution_sampler(make: Callable[[], Evolution], names: list[str], factor: float) -> Any:
    """An Optuna sampler over the evolution ``make`` builds; ``sampler.next(study)`` is its next candidate."""
    return _sampler_class()(make, names, factor)


_CLASS: list[type] = []  # the sampler class, defined on first use: importing this module imports no Optuna


def _sampler_class() -> type:
    if _CLASS:
        return _CLASS[0]
    from optuna.distributions import FloatDistribution
    from optuna.samplers import BaseSampler
    from optuna.trial import TrialState

    class _EvolutionSampler(BaseSampler):  # type: ignore[misc]
        def __init__(self, make: Callable[[], Evolution], names: list[str], factor: float) -> None:
            self._make, self._names = make, names
            self._space = {n: FloatDistribution(1.0, factor) for n in names}
            self._evolution: Evolution | None = None

        def next(self, study: Any) -> Candidate | None:
            """The candidate the evolution asks for after every outcome the study holds (None: it is over)."""
            told = {}
            for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
                if all(n in t.params for n in self._names):
                    told[_key(t.params[n] for n in self._names)] = _fitness(t)
            if self._evolution is None:
                self._evolution = self._make()
            while (asked := self._evolution.ask()) is not None and _key(asked.factors) in told:
                self._evolution.tell(told[_key(asked.factors)])
            return asked

        def infer_relative_search_space(self, study: Any, trial: Any) -> dict[str, Any]:
            return dict(self._space)

        def sample_relative(self, study: Any, trial: Any, search_space: dict[str, Any]) -> dict[str, Any]:
            asked = self.next(study)
            return {} if asked is None else dict(zip(self._names, asked.factors, strict=True))

        def sample_independent(self, study: Any, trial: Any, name: str, distribution: Any) -> Any:
            raise ValueError(f"the longrope evolution proposes every factor at once, not '{name}' alone")

    _CLASS.append(_EvolutionSampler)
    return _EvolutionSampler


def _fitness(trial: Any) -> float | None:
    """What the evolution ranks by: the value of a finished trial, None for an infeasible one, inf for a pruned
    one (both rank below every finished candidate). By the state, not the value: Optuna keeps a pruned trial's
    last intermediate value (a log PPL at a shorter length) as its value."""
    import math

    from optuna.trial import TrialState

    if trial.state == TrialState.COMPLETE:
        return float(trial.value)
    return None if trial.user_attrs.get("feasible") is False else math.inf
