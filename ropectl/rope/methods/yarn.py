"""yarn: interpolate low frequencies, keep high ones, scale attention (YaRN)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from ropectl.errors import MethodError
from ropectl.rope.formulas import (
    base_inv_freq,
    original_and_factor,
    yarn_correction_range,
    yarn_mscale,
    yarn_ramp,
)
from ropectl.rope.methods.bounds import SearchBound, around, bound
from ropectl.rope.methods.common import ORIGINAL, clean, original
from ropectl.rope.methods.registry import TRAINED, Method, Param
from ropectl.rope.params import YARN_DEFAULT_BETAS, Frequencies, RopeParams


def build(base: RopeParams, factor: float, o: Mapping[str, Any]) -> RopeParams:
    trained = original(base, o)
    scaling: dict[str, Any] = {"factor": factor, "original_max_position_embeddings": trained}
    scaling.update(clean(o, ("beta_fast", "beta_slow", "attention_factor", "mscale", "mscale_all_dim")))
    if o.get("truncate") is False:
        scaling["truncate"] = False
    return RopeParams("yarn", base.rope_theta, base.rotary_dim, int(round(trained * factor)), scaling)


def frequencies(p: RopeParams, seq_len: int | None) -> Frequencies:
    sc, dim = p.scaling, p.rotary_dim
    trained, s = original_and_factor(p, "yarn")
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
    low, high = yarn_correction_range(beta_fast, beta_slow, dim, p.rope_theta, trained, bool(truncate))
    ramp = yarn_ramp(low, high, dim // 2)
    inv = [f / s * r + f * (1 - r) for f, r in zip(base_inv_freq(p.rope_theta, dim), ramp)]
    return Frequencies(tuple(inv), float(attention), p.rope_theta)


def validate(o: Mapping[str, Any], rotary_dim: int) -> None:
    if not 0 < o["beta_slow"] < o["beta_fast"]:
        raise MethodError("yarn needs 0 < beta_slow < beta_fast", "e.g. beta_fast=32,beta_slow=1")
    if rotary_dim % 2:
        raise MethodError(
            f"the rotary dim {rotary_dim} is odd: transformers' yarn ramp then has one value less than the "
            "frequencies and cannot be built",
            "use --method linear, ntk or dynamic for this model",
        )


def gguf_attn_factor(p: RopeParams) -> float:
    """The multiplier llama.cpp needs so its YaRN cos/sin scale (attn_factor x its own 0.1 ln s + 1) equals
    transformers' attention factor."""
    return frequencies(p, None).attention_factor / yarn_mscale(p.factor or 1.0)


def gguf_keys(p: RopeParams) -> dict[str, Any]:
    sc = p.scaling
    out: dict[str, Any] = {
        "SCALING_FACTOR": float(p.factor or 1.0),
        "SCALING_ORIG_CTX_LEN": int(p.original_max_position_embeddings or 0),
        # Written for the architectures that read them; the others ignore them (patch warns, engines.llama_cpp).
        "SCALING_YARN_BETA_FAST": float(sc.get("beta_fast") or YARN_DEFAULT_BETAS["beta_fast"]),
        "SCALING_YARN_BETA_SLOW": float(sc.get("beta_slow") or YARN_DEFAULT_BETAS["beta_slow"]),
    }
    attn = gguf_attn_factor(p)
    if not math.isclose(attn, 1.0, rel_tol=1e-7):
        out["SCALING_ATTN_FACTOR"] = attn
    return out


def gguf_read(scaling: dict[str, Any], meta: Callable[[str], Any]) -> dict[str, Any]:
    """llama.cpp multiplies attn_factor by its own 0.1 ln(s) + 1; transformers' attention_factor is the product."""
    if meta("attn_factor") is not None:
        scaling["attention_factor"] = float(meta("attn_factor")) * yarn_mscale(float(scaling.get("factor") or 1.0))
    return scaling


def search_bounds(factor: float) -> tuple[SearchBound, ...]:
    """Its betas around their defaults (fitted once on Llama 2), the attention factor from 1 (none) to twice the
    default rule's excess over 1: the box `ropectl search` varies at a fixed factor."""
    fast, slow = YARN_DEFAULT_BETAS["beta_fast"], YARN_DEFAULT_BETAS["beta_slow"]
    mscale = yarn_mscale(factor)
    return (around("beta_fast", fast, 8, 2, 0.5), around("beta_slow", slow, 4, 2, 0.05),
            bound("attention_factor", 1.0, 1.0 + 2 * (mscale - 1.0), 0.005,
                  f"1 (no scaling) to twice the default's excess over 1 ({mscale:.4f})", start=mscale))


METHOD = Method("yarn", "YaRN: interpolate low frequencies, keep high ones, scale attention", (
    ORIGINAL,
    Param("beta_fast", float, YARN_DEFAULT_BETAS["beta_fast"], "rotations where the ramp ends (keep)"),
    Param("beta_slow", float, YARN_DEFAULT_BETAS["beta_slow"], "rotations where the ramp starts (interpolate)"),
    Param("attention_factor", float, None, "cos/sin scale (default 0.1 ln s + 1)"),
    Param("mscale", float, None, "DeepSeek-style mscale"),
    Param("mscale_all_dim", float, None, "DeepSeek-style mscale_all_dim"),
    Param("truncate", bool, True, "round the ramp ends to whole dimensions"),
), build, "yarn", frequencies, validate, gguf_type="yarn", max_positions={TRAINED: TRAINED}, needs_original=True,
    implied_factor=True, original_from_max_positions=True, reextendable=True,
    carried_options=("beta_fast", "beta_slow", "mscale", "mscale_all_dim", "truncate"), gguf_keys=gguf_keys,
    gguf_read=gguf_read, candidate_order=1, search_bounds=search_bounds, search_seed=True, search_default=True)
