"""ntk: static NTK-aware scaling, a raised rope_theta and no rope type of its own (it writes ``default``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ropectl.rope.formulas import ntk_theta
from ropectl.rope.methods.bounds import FACTOR, SearchBound, bound
from ropectl.rope.methods.common import ORIGINAL, own, target, unscaled_type
from ropectl.rope.methods.registry import Method
from ropectl.rope.params import RopeParams


def build(base: RopeParams, factor: float, o: Mapping[str, Any]) -> RopeParams:
    theta = ntk_theta(base.rope_theta, factor, base.rotary_dim)
    return RopeParams(unscaled_type(base), theta, base.rotary_dim, target(base, factor), own(base))


def search_bounds(factor: float) -> tuple[SearchBound, ...]:
    """Its factor (which moves theta) from 1, the model as trained, to twice target / trained. The step is a quarter
    of target / trained: on SmolLM2, PPL at the target stays within 0.002 nats over about +-15 % of theta around its
    best (docs/reference/search.md), so finer steps chase the text's noise."""
    return (bound(FACTOR, 1.0, 2 * factor, round(factor / 4, 4),
                  f"1 (the model as trained) to twice target / trained ({factor:g}), in steps of a quarter of it"),)


METHOD = Method("ntk", "static NTK-aware: rope_theta raised to theta*s^(d/(d-2))", (ORIGINAL,), build, "default",
                gguf_type="none", keeps_prope=True, aliases=("ntk_aware",),
                not_a_type="static NTK is a rope_theta change, not a rope type", candidate_order=2,
                search_bounds=search_bounds, search_seed=True)
