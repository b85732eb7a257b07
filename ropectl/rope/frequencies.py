"""Inverse frequencies and attention factors for every RoPE type, in float64.

Each rope type's formula lives in the method module that owns it (``ropectl.rope.methods``); the shared formulas
are in ``ropectl.rope.formulas`` and re-exported here.
"""

from __future__ import annotations

from ropectl.errors import MethodError
from ropectl.rope.formulas import (  # noqa: F401 (the public formula helpers)
    base_inv_freq,
    dynamic_theta,
    mrope_prerotated,
    ntk_theta,
    proportional_inv_freq,
    yarn_correction_range,
    yarn_mscale,
    yarn_ramp,
)
from ropectl.rope.methods import owner_of, rope_types
from ropectl.rope.params import Frequencies, RopeParams


def compute_frequencies(params: RopeParams, seq_len: int | None = None) -> Frequencies:
    """Inverse frequencies and attention factor the model uses at ``seq_len`` (None: at load time)."""
    owner = owner_of(params.rope_type)
    if owner is None or owner.frequencies is None:
        raise MethodError(
            f"unknown rope type '{params.rope_type}'",
            f"use one of {', '.join(sorted(rope_types()))} (static NTK is a rope_theta change)",
        )
    return owner.frequencies(params, seq_len)


def softmax_mscale(p: RopeParams) -> float:
    """The factor on the attention softmax scale of models with ``families.SOFTMAX_MSCALE_TYPES``:
    mscale(factor, mscale_all_dim)^2 for a scaled rope type with mscale_all_dim set, else 1."""
    all_dim = p.scaling.get("mscale_all_dim")
    if p.rope_type == "default" or not all_dim or not p.factor:
        return 1.0
    return yarn_mscale(float(p.factor), float(all_dim)) ** 2
