"""linear: position interpolation, every frequency divided by the factor."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ropectl.rope.formulas import base_inv_freq, factor_of
from ropectl.rope.methods.common import ORIGINAL, target
from ropectl.rope.methods.registry import TRAINED, Method
from ropectl.rope.params import Frequencies, RopeParams


def build(base: RopeParams, factor: float, o: Mapping[str, Any]) -> RopeParams:
    return RopeParams("linear", base.rope_theta, base.rotary_dim, target(base, factor), {"factor": factor})


def frequencies(p: RopeParams, seq_len: int | None) -> Frequencies:
    s = factor_of(p)
    return Frequencies(tuple(f / s for f in base_inv_freq(p.rope_theta, p.rotary_dim)), 1.0, p.rope_theta)


def gguf_keys(p: RopeParams) -> dict[str, Any]:
    return {"SCALING_FACTOR": float(p.factor or 1.0)}


METHOD = Method("linear", "position interpolation: every frequency divided by the factor", (ORIGINAL,), build,
                "linear", frequencies, gguf_type="linear", max_positions={TRAINED: TRAINED}, gguf_untyped=True,
                gguf_keys=gguf_keys, candidate_order=3, search_seed=True)
