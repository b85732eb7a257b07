"""longrope: LongRoPE's per-dimension rescale factors, a short list up to the original length and a long one past it."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ropectl.errors import MethodError
from ropectl.rope.formulas import base_inv_freq, original_and_factor
from ropectl.rope.methods.common import ORIGINAL, clean, original
from ropectl.rope.methods.registry import Method, Param
from ropectl.rope.params import Frequencies, RopeParams


def build(base: RopeParams, factor: float, o: Mapping[str, Any]) -> RopeParams:
    trained = original(base, o)
    scaling: dict[str, Any] = {
        "short_factor": [float(v) for v in o["short_factor"]],
        "long_factor": [float(v) for v in o["long_factor"]],
        "factor": factor,
        "original_max_position_embeddings": trained,
    }
    scaling.update(clean(o, ("attention_factor",)))
    return RopeParams("longrope", base.rope_theta, base.rotary_dim, int(round(trained * factor)), scaling)


def frequencies(p: RopeParams, seq_len: int | None) -> Frequencies:
    sc = p.scaling
    trained, s = original_and_factor(p, "longrope")
    attention = sc.get("attention_factor")
    if attention is None:
        attention = 1.0 if s <= 1 else math.sqrt(1 + math.log(s) / math.log(trained))
    ext: Sequence[float] = sc["long_factor"] if seq_len and seq_len > trained else sc["short_factor"]
    inv = [f / float(e) for f, e in zip(base_inv_freq(p.rope_theta, p.rotary_dim), ext)]
    return Frequencies(tuple(inv), float(attention), p.rope_theta)


def validate(o: Mapping[str, Any], rotary_dim: int) -> None:
    pairs = (rotary_dim + 1) // 2
    for key in ("short_factor", "long_factor"):
        values = o.get(key)
        if not values or len(values) != pairs:
            got = len(values) if values else 0
            raise MethodError(
                f"longrope {key} has {got} values but the rotary dim {rotary_dim} needs {pairs}",
                f"give {pairs} comma-separated factors, or a JSON file with both lists",
            )



def _rule_lengths(rope: RopeParams, trained: int, target: int) -> tuple[int, ...]:
    """The short factors up to the original length, the long ones one past it."""
    at = int(rope.original_max_position_embeddings or trained)
    return at, at + 1


METHOD = Method("longrope", "LongRoPE: per-dimension rescale factors (short and long lists)", (
    ORIGINAL,
    Param("short_factor", list, None, "rotary_dim/2 factors used up to the original length"),
    Param("long_factor", list, None, "rotary_dim/2 factors used beyond it"),
    Param("attention_factor", float, None, "cos/sin scale (default sqrt(1+ln s/ln L))"),
), build, "longrope", frequencies, validate,
    gguf_none="llama.cpp keeps LongRoPE factors in rope_factors_long/short tensors written when converting",
    length_dependent=True, rule_lengths=_rule_lengths,
    needs_original=True, aliases=("su",), implied_factor=True, original_at_top_level=True,
    explicit_attention_factor=True, factors_file=("short_factor", "long_factor"), search_per_pair=True)
