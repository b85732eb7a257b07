"""The RoPE formulas every method shares, in float64 plain Python (no torch).

Written from the published formulas and transformers' ``modeling_rope_utils`` semantics (defaults,
``or``-defaults, truncation, clamping), but independently. Each method module (``ropectl.rope.methods``) composes
these into its own frequencies.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ropectl.errors import MethodError
from ropectl.rope.params import RopeParams


def base_inv_freq(theta: float, dim: int) -> list[float]:
    """inv_i = theta^(-2i/d) for i in [0, d/2); an odd d gets ceil(d/2) pairs, as transformers' arange(0, d, 2)."""
    return [1.0 / theta ** (2 * i / dim) for i in range((dim + 1) // 2)]


def proportional_inv_freq(theta: float, head_dim: int, partial: float) -> list[float]:
    """p-RoPE (Gemma 4): the first partial*d/2 pairs rotate at theta^(-2i/d) over the full head dim d,
    the rest get frequency 0 (no rotation), so the cos/sin cover the whole head."""
    angles = int(partial * head_dim // 2)
    return [1.0 / theta ** (2 * i / head_dim) for i in range(angles)] + [0.0] * (head_dim // 2 - angles)


def mrope_prerotated(inv: Sequence[float], mrope_section: Sequence[int]) -> list[float]:
    """ERNIE-4.5-VL's stored order: the height/width share de-interleaved (even indices, then odd), time last."""
    t_dim = int(mrope_section[2])
    head, tail = list(inv[:-t_dim]), list(inv[-t_dim:])
    return head[0::2] + head[1::2] + tail


def ntk_theta(theta: float, factor: float, dim: int) -> float:
    """Static NTK-aware base change: theta' = theta * s^(d/(d-2))."""
    return theta * factor ** (dim / (dim - 2))


def dynamic_theta(theta: float, factor: float, dim: int, max_pos: int, seq_len: int | None) -> float:
    """Dynamic NTK base at a given length; equals theta up to ``max_pos`` (transformers' rule)."""
    length = max(seq_len or max_pos, max_pos)
    return theta * (factor * length / max_pos - (factor - 1)) ** (dim / (dim - 2))


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_correction_range(
    beta_fast: float, beta_slow: float, dim: int, theta: float, original: int, truncate: bool
) -> tuple[float, float]:
    """Dimension indices where the YaRN ramp starts and ends."""

    def dim_for(rotations: float) -> float:
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = dim_for(beta_fast), dim_for(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, dim - 1)


def yarn_ramp(low: float, high: float, n: int) -> list[float]:
    """0 below ``low`` (keep original frequency), 1 above ``high`` (fully interpolated)."""
    if low == high:
        high += 0.001  # transformers' guard against a zero-width ramp
    return [min(max((j - low) / (high - low), 0.0), 1.0) for j in range(n)]


def original_and_factor(p: RopeParams, method: str) -> tuple[int, float]:
    """yarn and longrope: with no factor, transformers takes max_position_embeddings / original."""
    original = require(p.original_max_position_embeddings, "original_max_position_embeddings", method)
    s = p.factor
    if s is None:
        s = require(p.max_position_embeddings, "max_position_embeddings", method) / original
    return original, s


def factor_of(p: RopeParams) -> float:
    return float(require(p.factor, "factor", p.rope_type))


def require(value: Any, key: str, rope_type: str) -> Any:
    if value is None:
        raise MethodError(
            f"rope type '{rope_type}' needs '{key}' and the config gives none",
            f"add '{key}' to the rope section, or pass it as a method option",
        )
    return value
