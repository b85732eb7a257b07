"""What a search may vary: one entry per searchable method, each parameter with stated bounds and a step.

Bounds come from the method's record (``ropectl.rope.methods``): each range is centred, on a log scale, on the
option's default there, wide enough to hold the hand-set values the references use (YaRN's beta_fast 32 and
beta_slow 1 fitted on Llama 2; Llama 3.1's 1 and 4), and disjoint where the method needs one option below the other
(beta_slow < beta_fast, low_freq_factor < high_freq_factor), so every point of the box is a valid method.

The factor of yarn and llama3 is fixed at target / trained: a smaller one cannot be served at the target (vLLM
derives the served length as original x factor, transformers 4.43-4.55 override it). ntk has no other parameter:
its factor, which moves theta, is what it searches, from 1 (the model as trained: ``none``) to twice the target's.
``longrope`` is stage 2 (``ropectl.search.evolution``): per-dimension factors, not a box of named options.

Both kinds of space drive the same study, pruner and loop (``ropectl.search.optimize``); what differs between them
(who proposes the trials, what sizes the loop, what is written) is a method of the space, and :func:`build_space`
is the one place that tells them apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

from ropectl.errors import UsageError
from ropectl.rope.methods import Method, MethodSpec, get_method, search_spaces, unscaled_name
from ropectl.rope.methods.bounds import FACTOR, SearchBound
from ropectl.search.loop import LOOP_OPTIONS, LoopSettings

if TYPE_CHECKING:
    from ropectl.search.evolution import FactorSpace

Bound = SearchBound  # the bounds live with each method (Method.search_bounds); the search reads them
DEFAULT_BUDGET = 20  # trials of a box search with neither --trials nor --budget


@dataclass(frozen=True)
class BoxSpace:
    """Stage 1: a box of a method's named options, proposed by Optuna's TPE or CMA-ES."""

    name: str
    method: str  # the registry method the result is written as
    factor: float  # target / trained (ntk: the default its search starts from)
    bounds: tuple[Bound, ...]
    takes = ("--trials", "--sampler")
    proposes = "Optuna's --sampler proposes its trials, counted by --trials"
    labels_trials = True  # each trial's row names its spec
    seeds: tuple[tuple[str, tuple[float, ...]], ...] = ()  # per-pair factors to plot against: none for a box

    @property
    def gguf_refusal(self) -> tuple[str, str] | None:
        """(problem, fix) where a GGUF cannot carry what this space writes."""
        why = get_method(self.method).gguf_none
        return None if not why else (f"--space {self.name} cannot be written to this GGUF: {why}",
                                     "use --space yarn or ntk on a GGUF, or search the Hugging Face checkpoint")

    def spec(self, values: Mapping[str, float]) -> MethodSpec:
        """The method spec of one point (ntk at factor 1 is the unscaled model: ``none``)."""
        if FACTOR in values:
            factor = float(values[FACTOR])
            if factor <= 1.0:
                return MethodSpec(unscaled_name())
            return MethodSpec(self.method, round(factor, 6))
        options = tuple((b.name, round(float(values[b.name]), 6)) for b in self.bounds)
        return MethodSpec(self.method, round(self.factor, 6), options)

    def start(self) -> dict[str, float]:
        """The closed-form point (the method's defaults), the first trial of every search."""
        method = get_method(self.method)
        out = {}
        for b in self.bounds:
            if b.start is not None:  # a default that is a rule of the factor (yarn's attention factor)
                default = b.start
            else:
                default = self.factor if b.name == FACTOR else method.param(b.name).default
            out[b.name] = b.grid(float(default))
        return out

    def describe(self) -> list[dict[str, Any]]:
        return [{"name": b.name, "low": b.low, "high": b.high, "step": b.step, "why": b.why} for b in self.bounds]

    def at(self, rope: Any, target: int) -> BoxSpace:
        return self  # the box depends on target / trained only

    def checks(self) -> tuple[MethodSpec, ...]:
        """What the config must take before any weight loads: the closed-form start."""
        return (self.spec(self.start()),)

    def identity(self, loop: LoopSettings) -> dict[str, Any]:
        return {}  # the bounds (in every identity) are the box; workers may use other samplers

    def sampler_name(self, loop: LoopSettings) -> str:
        return loop.sampler or "tpe"

    def sampler(self, loop: LoopSettings) -> Any:
        """TPE or CMA-ES; workers sharing a --storage study draw unseeded, so as not to propose the same points
        (the split and the needles still follow --seed, part of the identity they share)."""
        from ropectl.search.study import sampler

        return sampler(self.sampler_name(loop), None if loop.shared else loop.seed, self.budget(loop))

    def budget(self, loop: LoopSettings) -> int | None:
        """Trials, pruned and infeasible ones included: --trials, else 20 unless --budget (minutes) alone ends it."""
        return loop.trials if loop.trials is not None else (None if loop.minutes else DEFAULT_BUDGET)

    def planned(self, loop: LoopSettings) -> int | None:
        return self.budget(loop)

    def begin(self, study: Any) -> None:
        """The closed form itself is the first point: queued unless a trial holds it already. One stopped by Ctrl-C
        or SIGTERM is failed and does not, so a resumed search measures it as an uninterrupted one did."""
        from optuna.trial import TrialState

        start = self.start()
        for t in study.get_trials(deepcopy=False):
            if t.state != TrialState.FAIL and t.system_attrs.get("fixed_params", t.params) == start:
                return
        study.enqueue_trial(start)

    def finished(self, study: Any) -> bool:
        return False  # the budget ends a box search (MaxTrialsCallback), or the minutes

    def suggest(self, trial: Any) -> MethodSpec:
        return self.spec({b.name: float(trial.suggest_float(b.name, b.low, b.high, step=b.step))
                          for b in self.bounds})

    def spec_of(self, params: Mapping[str, float]) -> MethodSpec:
        return self.spec(params)

    def row_params(self, params: Mapping[str, float]) -> dict[str, Any]:
        return dict(params)

    def ship(self, spec: MethodSpec, out: Path) -> MethodSpec:
        return spec  # the spec says it all: nothing beside it to write


Space = Union[BoxSpace, "FactorSpace"]


def space_names() -> tuple[str, ...]:
    """Every --space, stage 1 first (the registry's methods with a search box), then stage 2."""
    spaces = search_spaces()
    return tuple(sorted(spaces, key=lambda n: spaces[n].search_per_pair))


def default_space() -> str:
    return next(n for n, m in search_spaces().items() if m.search_default)


def _method(name: str) -> Method:
    spaces = search_spaces()
    if name not in spaces:
        raise UsageError(f"unknown search space '{name}'", f"use one of: {', '.join(space_names())}")
    return spaces[name]


def build_space(name: str, factor: float) -> Space:
    """The space ``name`` for a search at ``factor`` = target / trained: the one branch between the two kinds."""
    from ropectl.search.evolution import FactorSpace

    method = _method(name)
    if method.search_per_pair or method.search_bounds is None:
        return FactorSpace(name, name, factor)
    return BoxSpace(name, name, factor, method.search_bounds(factor))


def check_loop(name: str, loop: LoopSettings) -> None:
    """An option that sizes or drives another kind of space's loop is refused, naming the spaces that take it."""
    space = build_space(name, 2.0)
    for flag, field in LOOP_OPTIONS.items():
        if getattr(loop, field) is not None and flag not in space.takes:
            takers = [n for n in space_names() if flag in build_space(n, 2.0).takes]
            raise UsageError(f"{flag} has no meaning for --space {name}: {space.proposes}",
                             f"drop {flag}, or search --space {' / '.join(takers)}")


def check_space(name: str, model: str) -> None:
    """A space whose method the model's own engines cannot read is refused before anything loads."""
    from ropectl.readers import serving_engines_for, why_not_served

    space = build_space(name, 2.0)  # the method and its kind only: no bounds are read here
    if model.lower().endswith(".gguf") and space.gguf_refusal:
        raise UsageError(*space.gguf_refusal)
    why = why_not_served(get_method(space.method).rope_type, serving_engines_for(model))
    if why:
        raise UsageError(f"--space {space.name} is not served as evaluated: {why}", "pick another --space")


def engine_notes(name: str, model: str, architecture: str) -> list[str]:
    """Where a searched parameter reaches an engine another way than the written file (llama.cpp and YaRN's betas:
    read from GGUF metadata for a few architectures only, its flags set them for the rest)."""
    from ropectl.readers import llama_cpp

    if not model.lower().endswith(".gguf"):
        return []
    # The searched options llama.cpp would not read from this GGUF: any value off the default shows them.
    off_default = {b.name: b.high + 1.0 for b in build_space(name, 2.0).bounds}
    flagged = [k for k in llama_cpp.ignored_betas(architecture, off_default) if k in llama_cpp.FLAGS]
    if not flagged:
        return []
    flags = " / ".join(llama_cpp.FLAGS[k] for k in flagged)
    return [f"note: llama.cpp reads YaRN's betas from GGUF metadata only for {', '.join(sorted(llama_cpp.YARN_BETA_ARCHS))}"
            f", not '{architecture}': found betas ship as its {flags or 'beta'} flags, printed with the result"]


def values_of(spec: MethodSpec, space: BoxSpace) -> dict[str, float]:
    """A spec's point in ``space`` (the inverse of ``Space.spec``)."""
    if space.bounds and space.bounds[0].name == FACTOR:
        return {FACTOR: float(spec.factor or 1.0)}
    options = dict(spec.options)
    return {b.name: float(options[b.name]) for b in space.bounds}


def resolution(space: BoxSpace) -> dict[str, float]:
    return {b.name: b.step for b in space.bounds}
