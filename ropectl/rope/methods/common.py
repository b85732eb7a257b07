"""What the method modules share: the trained length, the target, option cleaning and p-RoPE's own keys."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ropectl.errors import MethodError
from ropectl.rope.methods.registry import Param, is_prope_type
from ropectl.rope.params import RopeParams

ORIGINAL = Param("original_max_position_embeddings", int, None, "pretraining context (default: from the config)")


def trained_length(base: RopeParams) -> int:
    if not base.trained_context:
        raise MethodError(
            "the model's trained context length is unknown",
            "pass original_max_position_embeddings=N as a method option",
        )
    return int(base.trained_context)


def target(base: RopeParams, factor: float) -> int:
    return int(round(trained_length(base) * factor))


def original(base: RopeParams, o: Mapping[str, Any]) -> int:
    return int(o.get("original_max_position_embeddings") or trained_length(base))


def clean(options: Mapping[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    return {k: options[k] for k in names if options.get(k) is not None}


def is_prope(base: RopeParams) -> bool:
    return is_prope_type(base.rope_type)


def own(base: RopeParams) -> dict[str, Any]:
    """The keys that define the unscaled RoPE itself: p-RoPE's partial factor."""
    return {k: v for k, v in base.scaling.items() if k == "partial_rotary_factor"} if is_prope(base) else {}


def unscaled_type(base: RopeParams) -> str:
    return base.rope_type if is_prope(base) else "default"
