"""proportional: position interpolation on p-RoPE (Gemma 4), unrotated pairs kept at frequency 0."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ropectl.errors import MethodError
from ropectl.rope.formulas import proportional_inv_freq
from ropectl.rope.methods.common import target
from ropectl.rope.methods.registry import Method, Param
from ropectl.rope.params import Frequencies, RopeParams


def build(base: RopeParams, factor: float, o: Mapping[str, Any]) -> RopeParams:
    partial = o.get("partial_rotary_factor") or base.scaling.get("partial_rotary_factor") or 1.0
    scaling = {"partial_rotary_factor": float(partial), "factor": factor}
    return RopeParams("proportional", base.rope_theta, base.rotary_dim, target(base, factor), scaling)


def frequencies(p: RopeParams, seq_len: int | None) -> Frequencies:
    # ``rotary_dim`` is the whole head dim here; the factor divides every frequency (position interpolation).
    partial = float(p.scaling.get("partial_rotary_factor", 1.0))
    s = float(p.scaling.get("factor") or 1.0)
    inv = [f / s for f in proportional_inv_freq(p.rope_theta, p.rotary_dim, partial)]
    return Frequencies(tuple(inv), 1.0, p.rope_theta)


def validate(o: Mapping[str, Any], rotary_dim: int) -> None:
    partial = o.get("partial_rotary_factor")
    if partial is not None and not 0 < partial <= 1:
        raise MethodError(f"partial_rotary_factor must be in (0, 1], got {partial}", "e.g. partial_rotary_factor=0.25")


METHOD = Method("proportional", "p-RoPE (Gemma 4): every frequency divided by the factor, unrotated pairs kept at 0", (
    Param("partial_rotary_factor", float, None, "share of each head that rotates (default: the model's)"),
), build, "proportional", frequencies, validate, keeps_prope=True, prope=True)
