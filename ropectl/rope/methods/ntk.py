"""ntk: static NTK-aware scaling, a raised rope_theta and no rope type of its own (it writes ``default``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ropectl.rope.formulas import ntk_theta
from ropectl.rope.methods.common import ORIGINAL, own, target, unscaled_type
from ropectl.rope.methods.registry import Method
from ropectl.rope.params import RopeParams


def build(base: RopeParams, factor: float, o: Mapping[str, Any]) -> RopeParams:
    theta = ntk_theta(base.rope_theta, factor, base.rotary_dim)
    return RopeParams(unscaled_type(base), theta, base.rotary_dim, target(base, factor), own(base))


METHOD = Method("ntk", "static NTK-aware: rope_theta raised to theta*s^(d/(d-2))", (ORIGINAL,), build, "default",
                gguf_type="none", keeps_prope=True, aliases=("ntk_aware",),
                not_a_type="static NTK is a rope_theta change, not a rope type", candidate_order=2)
