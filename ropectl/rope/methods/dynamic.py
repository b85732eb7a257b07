"""dynamic: NTK whose theta grows with the sequence length past the trained context."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ropectl.rope.formulas import base_inv_freq, dynamic_theta, factor_of, require
from ropectl.rope.methods.common import ORIGINAL, trained_length
from ropectl.rope.methods.registry import TARGET, TRAINED, Method
from ropectl.rope.params import Frequencies, RopeParams


def build(base: RopeParams, factor: float, o: Mapping[str, Any]) -> RopeParams:
    # transformers rescales only past max_position_embeddings, so it must stay at the trained length.
    return RopeParams("dynamic", base.rope_theta, base.rotary_dim, trained_length(base), {"factor": factor})


def frequencies(p: RopeParams, seq_len: int | None) -> Frequencies:
    max_pos = require(p.max_position_embeddings, "max_position_embeddings", "dynamic")
    theta = dynamic_theta(p.rope_theta, factor_of(p), p.rotary_dim, max_pos, seq_len)
    return Frequencies(tuple(base_inv_freq(theta, p.rotary_dim)), 1.0, theta)


METHOD = Method("dynamic", "dynamic NTK: theta grows with the sequence length past the trained context", (ORIGINAL,),
                build, "dynamic", frequencies, gguf_none="llama.cpp has no dynamic NTK scaling",
                gguf_fix="use ntk or yarn for llama.cpp",
                max_positions={TARGET: TRAINED, TRAINED: TRAINED},
                max_position_rule="kept at the trained context (scaling starts past it)", length_dependent=True,
                rule_lengths=lambda rope, trained, target: ((trained + target) // 2,),  # an engine serves one base
                patch_note="dynamic keeps max_position_embeddings at the trained length: transformers scales only "
                           "beyond it", candidate_order=4,
                inference_only="dynamic NTK is an inference-time method: its theta changes with each sequence's "
                               "length, so no fixed RoPE is trained (LLaMA-Factory warns against training with it)")
