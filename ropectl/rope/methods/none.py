"""none: the unscaled base RoPE; it owns the ``default`` rope type's frequencies."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ropectl.rope.formulas import base_inv_freq
from ropectl.rope.methods.common import own, unscaled_type
from ropectl.rope.methods.registry import Method
from ropectl.rope.params import Frequencies, RopeParams


def build(base: RopeParams, factor: float, o: Mapping[str, Any]) -> RopeParams:
    return RopeParams(unscaled_type(base), base.rope_theta, base.rotary_dim, base.max_position_embeddings, own(base))


def frequencies(p: RopeParams, seq_len: int | None) -> Frequencies:
    return Frequencies(tuple(base_inv_freq(p.rope_theta, p.rotary_dim)), 1.0, p.rope_theta)


METHOD = Method("none", "unscaled RoPE (the base model)", (), build, "default", frequencies, uses_factor=False,
                gguf_type="none", max_position_rule="reset to the trained context", keeps_prope=True, unscaled=True)
