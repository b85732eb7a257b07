"""Each scaling method as a pure function: the unscaled base RoPE, a factor and options -> the scaled RoPE.

The registry (``ropectl.rope.methods``) declares the methods and their options; these build the result.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ropectl.errors import MethodError
from ropectl.rope.frequencies import ntk_theta
from ropectl.rope.params import RopeParams


def _target(base: RopeParams, factor: float) -> int:
    return int(round(trained_length(base) * factor))


def trained_length(base: RopeParams) -> int:
    if not base.trained_context:
        raise MethodError(
            "the model's trained context length is unknown",
            "pass original_max_position_embeddings=N as a method option",
        )
    return int(base.trained_context)


def _clean(options: Mapping[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    return {k: options[k] for k in names if options.get(k) is not None}


def _own(base: RopeParams) -> dict[str, Any]:
    """The keys that define the unscaled RoPE itself: p-RoPE's partial factor."""
    return {k: v for k, v in base.scaling.items() if k == "partial_rotary_factor"} if is_prope(base) else {}


def is_prope(base: RopeParams) -> bool:
    return base.rope_type == "proportional"


def build_none(base: RopeParams, factor: float, o: Mapping[str, Any]) -> RopeParams:
    kind = "proportional" if is_prope(base) else "default"
    return RopeParams(kind, base.rope_theta, base.rotary_dim, base.max_position_embeddings, _own(base))


def build_linear(base: RopeParams, factor: float, o: Mapping[str, Any]) -> RopeParams:
    return RopeParams("linear", base.rope_theta, base.rotary_dim, _target(base, factor), {"factor": factor})


def build_ntk(base: RopeParams, factor: float, o: Mapping[str, Any]) -> RopeParams:
    theta = ntk_theta(base.rope_theta, factor, base.rotary_dim)
    kind = "proportional" if is_prope(base) else "default"
    return RopeParams(kind, theta, base.rotary_dim, _target(base, factor), _own(base))


def build_dynamic(base: RopeParams, factor: float, o: Mapping[str, Any]) -> RopeParams:
    # transformers rescales only past max_position_embeddings, so it must stay at the trained length.
    return RopeParams("dynamic", base.rope_theta, base.rotary_dim, trained_length(base), {"factor": factor})


def build_yarn(base: RopeParams, factor: float, o: Mapping[str, Any]) -> RopeParams:
    original = int(o.get("original_max_position_embeddings") or trained_length(base))
    scaling: dict[str, Any] = {"factor": factor, "original_max_position_embeddings": original}
    scaling.update(_clean(o, ("beta_fast", "beta_slow", "attention_factor", "mscale", "mscale_all_dim")))
    if o.get("truncate") is False:
        scaling["truncate"] = False
    return RopeParams("yarn", base.rope_theta, base.rotary_dim, int(round(original * factor)), scaling)


def build_llama3(base: RopeParams, factor: float, o: Mapping[str, Any]) -> RopeParams:
    original = int(o.get("original_max_position_embeddings") or trained_length(base))
    scaling = {
        "factor": factor,
        "low_freq_factor": float(o.get("low_freq_factor", 1.0)),
        "high_freq_factor": float(o.get("high_freq_factor", 4.0)),
        "original_max_position_embeddings": original,
    }
    return RopeParams("llama3", base.rope_theta, base.rotary_dim, int(round(original * factor)), scaling)


def build_longrope(base: RopeParams, factor: float, o: Mapping[str, Any]) -> RopeParams:
    original = int(o.get("original_max_position_embeddings") or trained_length(base))
    scaling: dict[str, Any] = {
        "short_factor": [float(v) for v in o["short_factor"]],
        "long_factor": [float(v) for v in o["long_factor"]],
        "factor": factor,
        "original_max_position_embeddings": original,
    }
    scaling.update(_clean(o, ("attention_factor",)))
    return RopeParams("longrope", base.rope_theta, base.rotary_dim, int(round(original * factor)), scaling)


def build_proportional(base: RopeParams, factor: float, o: Mapping[str, Any]) -> RopeParams:
    partial = o.get("partial_rotary_factor") or base.scaling.get("partial_rotary_factor") or 1.0
    scaling = {"partial_rotary_factor": float(partial), "factor": factor}
    return RopeParams("proportional", base.rope_theta, base.rotary_dim, _target(base, factor), scaling)
