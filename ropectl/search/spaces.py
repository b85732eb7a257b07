"""What a search may vary: one entry per searchable method, each parameter with stated bounds and a step.

Bounds come from the method's record (``ropectl.rope.methods``): each range is centred, on a log scale, on the
option's default there, wide enough to hold the hand-set values the references use (YaRN's beta_fast 32 and
beta_slow 1 fitted on Llama 2; Llama 3.1's 1 and 4), and disjoint where the method needs one option below the other
(beta_slow < beta_fast, low_freq_factor < high_freq_factor), so every point of the box is a valid method.

The factor of yarn and llama3 is fixed at target / trained: a smaller one cannot be served at the target (vLLM
derives the served length as original x factor, transformers 4.43-4.55 override it). ntk has no other parameter:
its factor, which moves theta, is what it searches, from 1 (the model as trained: ``none``) to twice the target's.
``longrope`` is stage 2 (``ropectl.search.longrope``): per-dimension factors, not a box of named options.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ropectl.errors import UsageError
from ropectl.rope.methods import Method, MethodSpec, get_method, search_spaces, unscaled_name
from ropectl.rope.methods.bounds import FACTOR, SearchBound

Bound = SearchBound  # the bounds live with each method (Method.search_bounds); the search reads them


@dataclass(frozen=True)
class Space:
    name: str
    method: str  # the registry method the result is written as
    factor: float  # target / trained (ntk: the default its search starts from)
    bounds: tuple[Bound, ...]
    stage: int = 1

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


def space_names() -> tuple[str, ...]:
    """Every --space, stage 1 first (the registry's methods with a search box), then stage 2."""
    spaces = search_spaces()
    return tuple(sorted(spaces, key=lambda n: spaces[n].search_per_pair))


def default_space() -> str:
    return next(n for n, m in search_spaces().items() if m.search_default)


def seed_methods() -> tuple[str, ...]:
    """The closed forms whose per-pair factors seed stage 2 (LongRoPE seeds from PI, NTK and YaRN)."""
    from ropectl.rope.methods import METHODS

    return tuple(n for n, m in METHODS.items() if m.search_seed)


def _method(name: str) -> Method:
    spaces = search_spaces()
    if name not in spaces:
        raise UsageError(f"unknown search space '{name}'", f"use one of: {', '.join(space_names())}")
    return spaces[name]


def build_space(name: str, factor: float) -> Space:
    """The space ``name`` for a search at ``factor`` = target / trained."""
    method = _method(name)
    if method.search_per_pair or method.search_bounds is None:
        return Space(name, name, factor, (), stage=2)
    return Space(name, name, factor, method.search_bounds(factor))


def check_space(name: str, model: str) -> None:
    """A space whose method the model's own engines cannot read is refused before anything loads."""
    from ropectl.readers import serving_engines_for, why_not_served

    space = build_space(name, 2.0)  # the method and stage only: no bounds are read here
    method, is_gguf = get_method(space.method), model.lower().endswith(".gguf")
    if is_gguf and space.stage == 2:
        raise UsageError("a longrope search writes per-dimension factors, which a GGUF cannot carry (ropectl's GGUF "
                         "patch copies tensors unchanged and llama.cpp has no longrope metadata)",
                         "search the Hugging Face checkpoint, or use --space yarn or ntk on the GGUF")
    if is_gguf and method.gguf_none:
        raise UsageError(f"--space {space.name} cannot be written to this GGUF: {method.gguf_none}",
                         "use --space yarn or ntk on a GGUF, or search the Hugging Face checkpoint")
    why = why_not_served(method.rope_type, serving_engines_for(model))
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


def values_of(spec: MethodSpec, space: Space) -> dict[str, float]:
    """A spec's point in ``space`` (the inverse of ``Space.spec``)."""
    if space.bounds and space.bounds[0].name == FACTOR:
        return {FACTOR: float(spec.factor or 1.0)}
    options = dict(spec.options)
    return {b.name: float(options[b.name]) for b in space.bounds}


def resolution(space: Space) -> dict[str, float]:
    return {b.name: b.step for b in space.bounds}
