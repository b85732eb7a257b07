"""Inverse frequencies and attention factors for every RoPE type, in float64.

Written from the published formulas and transformers' ``modeling_rope_utils`` semantics (defaults,
``or``-defaults, truncation, clamping), but independently: plain Python floats, no torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from ropectl.errors import MethodError
from ropectl.rope.params import YARN_DEFAULT_BETAS, Frequencies, RopeParams


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


def _default(p: RopeParams, seq_len: int | None) -> Frequencies:
    return Frequencies(tuple(base_inv_freq(p.rope_theta, p.rotary_dim)), 1.0, p.rope_theta)


def _linear(p: RopeParams, seq_len: int | None) -> Frequencies:
    s = _factor(p)
    inv = [f / s for f in base_inv_freq(p.rope_theta, p.rotary_dim)]
    return Frequencies(tuple(inv), 1.0, p.rope_theta)


def _dynamic(p: RopeParams, seq_len: int | None) -> Frequencies:
    max_pos = _require(p.max_position_embeddings, "max_position_embeddings", "dynamic")
    theta = dynamic_theta(p.rope_theta, _factor(p), p.rotary_dim, max_pos, seq_len)
    return Frequencies(tuple(base_inv_freq(theta, p.rotary_dim)), 1.0, theta)


def _original_and_factor(p: RopeParams, method: str) -> tuple[int, float]:
    """yarn and longrope: with no factor, transformers takes max_position_embeddings / original."""
    original = _require(p.original_max_position_embeddings, "original_max_position_embeddings", method)
    s = p.factor
    if s is None:
        s = _require(p.max_position_embeddings, "max_position_embeddings", method) / original
    return original, s


def _yarn(p: RopeParams, seq_len: int | None) -> Frequencies:
    sc, dim = p.scaling, p.rotary_dim
    original, s = _original_and_factor(p, "yarn")
    attention = sc.get("attention_factor")
    if attention is None:
        mscale, mscale_all = sc.get("mscale"), sc.get("mscale_all_dim")
        if mscale and mscale_all:
            attention = yarn_mscale(s, mscale) / yarn_mscale(s, mscale_all)
        else:
            attention = yarn_mscale(s)
    beta_fast = sc.get("beta_fast") or YARN_DEFAULT_BETAS["beta_fast"]
    beta_slow = sc.get("beta_slow") or YARN_DEFAULT_BETAS["beta_slow"]
    truncate = sc.get("truncate", True)
    low, high = yarn_correction_range(beta_fast, beta_slow, dim, p.rope_theta, original, bool(truncate))
    ramp = yarn_ramp(low, high, dim // 2)
    base = base_inv_freq(p.rope_theta, dim)
    inv = [f / s * r + f * (1 - r) for f, r in zip(base, ramp)]
    return Frequencies(tuple(inv), float(attention), p.rope_theta)


def _llama3(p: RopeParams, seq_len: int | None) -> Frequencies:
    sc = p.scaling
    s = _factor(p)
    lff, hff = float(sc["low_freq_factor"]), float(sc["high_freq_factor"])
    original = _require(p.original_max_position_embeddings, "original_max_position_embeddings", "llama3")
    low_wl, high_wl = original / lff, original / hff
    inv = []
    for f in base_inv_freq(p.rope_theta, p.rotary_dim):
        wl = 2 * math.pi / f
        if wl < high_wl:
            inv.append(f)
        elif wl > low_wl:
            inv.append(f / s)
        else:
            smooth = (original / wl - lff) / (hff - lff)
            inv.append((1 - smooth) * f / s + smooth * f)
    return Frequencies(tuple(inv), 1.0, p.rope_theta)


def _longrope(p: RopeParams, seq_len: int | None) -> Frequencies:
    sc = p.scaling
    original, s = _original_and_factor(p, "longrope")
    attention = sc.get("attention_factor")
    if attention is None:
        attention = 1.0 if s <= 1 else math.sqrt(1 + math.log(s) / math.log(original))
    ext: Sequence[float] = sc["long_factor"] if seq_len and seq_len > original else sc["short_factor"]
    base = base_inv_freq(p.rope_theta, p.rotary_dim)
    inv = [f / float(e) for f, e in zip(base, ext)]
    return Frequencies(tuple(inv), float(attention), p.rope_theta)


def _proportional(p: RopeParams, seq_len: int | None) -> Frequencies:
    # ``rotary_dim`` is the whole head dim here; the factor divides every frequency (position interpolation).
    partial = float(p.scaling.get("partial_rotary_factor", 1.0))
    s = float(p.scaling.get("factor") or 1.0)
    inv = [f / s for f in proportional_inv_freq(p.rope_theta, p.rotary_dim, partial)]
    return Frequencies(tuple(inv), 1.0, p.rope_theta)


def _factor(p: RopeParams) -> float:
    return float(_require(p.factor, "factor", p.rope_type))


def _require(value, key: str, rope_type: str):
    if value is None:
        raise MethodError(
            f"rope type '{rope_type}' needs '{key}' and the config gives none",
            f"add '{key}' to the rope section, or pass it as a method option",
        )
    return value


_COMPUTE: dict[str, Callable[[RopeParams, int | None], Frequencies]] = {
    "default": _default,
    "linear": _linear,
    "dynamic": _dynamic,
    "yarn": _yarn,
    "llama3": _llama3,
    "longrope": _longrope,
    "proportional": _proportional,
}


def compute_frequencies(params: RopeParams, seq_len: int | None = None) -> Frequencies:
    """Inverse frequencies and attention factor the model uses at ``seq_len`` (None: at load time)."""
    try:
        compute = _COMPUTE[params.rope_type]
    except KeyError:
        raise MethodError(
            f"unknown rope type '{params.rope_type}'",
            f"use one of {', '.join(sorted(_COMPUTE))} (static NTK is a rope_theta change)",
        ) from None
    return compute(params, seq_len)


def softmax_mscale(p: RopeParams) -> float:
    """The factor on the attention softmax scale of models with ``families.SOFTMAX_MSCALE_TYPES``:
    mscale(factor, mscale_all_dim)^2 for a scaled rope type with mscale_all_dim set, else 1."""
    all_dim = p.scaling.get("mscale_all_dim")
    if p.rope_type == "default" or not all_dim or not p.factor:
        return 1.0
    return yarn_mscale(float(p.factor), float(all_dim)) ** 2
