"""How vLLM's model files build their rotary embedding, where that is not the generic ``get_rope`` reading.

Read in vLLM's own model code (0.29 and 0.32 agree on each entry; tests/compat/test_vllm_rope.py builds the
rotary embeddings with vLLM's model classes and compares them with transformers):

- ``deepseek_v2.py`` (DeepSeek-V2/V3, Kimi K2, GLM-4.7-Flash, LongCat-Flash: multi-head latent attention): every
  rope type other than ``default`` is renamed ``deepseek_yarn`` and built as YaRN from the section's ``factor``,
  ``original_max_position_embeddings``, betas, ``mscale`` and ``mscale_all_dim`` (a missing key raises KeyError);
  the cos/sin scale is mscale(factor, mscale) / mscale(factor, mscale_all_dim), and ``truncate`` is not read.
- ``gpt_oss.py``: always YaRN, from ``factor``, ``original_max_position_embeddings``, ``beta_fast``, ``beta_slow``
  (each required) and ``truncate``; the attention factor and mscale keys are not passed, so the cos/sin scale is
  0.1 ln(factor) + 1.
- ``MRotaryEmbedding`` (multimodal RoPE, any rope section with ``mrope_section``): for yarn it computes the
  correction range from original_max_position_embeddings x ``positions_factor``, which is 4 unless the model file
  passes 1 (Qwen3-VL and Qwen3.5 do).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ropectl.rope.params import YARN_DEFAULT_BETAS, RopeParams

MLA_TYPES = frozenset({"deepseek_v2", "deepseek_v3", "kimi_k2", "glm4_moe_lite", "longcat_flash"})
ALWAYS_YARN_TYPES = frozenset({"gpt_oss"})
# Model files that pass positions_factor=1 to MRotaryEmbedding (qwen3_vl.py, qwen3_5.py); every other one keeps 4.
MROPE_FACTOR_ONE = frozenset({
    "qwen3_vl", "qwen3_vl_text", "qwen3_vl_moe", "qwen3_vl_moe_text",
    "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text",
})
MROPE_POSITIONS_FACTOR = 4

MLA_NOTE = ("vLLM's DeepSeek model file (deepseek_v2.py, multi-head latent attention) turns every scaled rope type "
            "into its own YaRN ('deepseek_yarn')")
GPT_OSS_NOTE = "vLLM's gpt-oss model file always builds YaRN from factor, original_max_position_embeddings and betas"
MROPE_NOTE = ("vLLM's multimodal RoPE (MRotaryEmbedding) computes YaRN's correction range from "
              f"original_max_position_embeddings x {MROPE_POSITIONS_FACTOR} for this model type")


def _mscale(factor: float, mscale: float = 1.0) -> float:
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def _missing(rope: RopeParams, keys: tuple[str, ...], note: str) -> str | None:
    gone = [k for k in keys if rope.scaling.get(k) is None]
    return f"{note}, and raises KeyError '{gone[0]}' on this rope section" if gone else None


def _yarn(rope: RopeParams, scaling: Mapping[str, Any]) -> RopeParams:
    return RopeParams("yarn", rope.rope_theta, rope.rotary_dim, rope.max_position_embeddings, dict(scaling))


def _mla(rope: RopeParams) -> RopeParams | str:
    if rope.rope_type == "default":
        return rope
    error = _missing(rope, ("factor", "original_max_position_embeddings"), MLA_NOTE)
    if error:
        return error
    sc, factor = rope.scaling, float(rope.scaling["factor"])
    scale = _mscale(factor, float(sc.get("mscale") or 1.0)) / _mscale(factor, float(sc.get("mscale_all_dim") or 0.0))
    keep = {k: sc[k] for k in ("factor", "original_max_position_embeddings", *YARN_DEFAULT_BETAS) if k in sc}
    return _yarn(rope, {**keep, "attention_factor": scale})


def _gpt_oss(rope: RopeParams) -> RopeParams | str:
    error = _missing(rope, ("factor", "original_max_position_embeddings", *YARN_DEFAULT_BETAS), GPT_OSS_NOTE)
    if error:
        return error
    sc = rope.scaling
    keep = {k: sc[k] for k in ("factor", "original_max_position_embeddings", *YARN_DEFAULT_BETAS, "truncate") if k in sc}
    return _yarn(rope, keep)


def _mrope(rope: RopeParams, model_type: str) -> RopeParams:
    from ropectl.rope.frequencies import compute_frequencies

    sc = rope.scaling
    if rope.rope_type != "yarn" or "mrope_section" not in sc or model_type in MROPE_FACTOR_ONE:
        return rope
    # the cos/sin scale stays the one of the written factor: only the ramp moves
    scale = compute_frequencies(rope).attention_factor
    original = int(rope.original_max_position_embeddings or rope.max_position_embeddings or 0)
    return rope.with_(scaling={**sc, "original_max_position_embeddings": original * MROPE_POSITIONS_FACTOR,
                               "attention_factor": scale})


def model_file_rope(model_type: str, rope: RopeParams) -> tuple[RopeParams | str, str | None]:
    """What vLLM's model file for ``model_type`` builds from ``rope`` (or the error it raises), and the note that
    says why it departs from the generic reading (None: it does not)."""
    if model_type in MLA_TYPES:
        built = _mla(rope)
        note = MLA_NOTE if built is not rope else None
    elif model_type in ALWAYS_YARN_TYPES:
        built, note = _gpt_oss(rope), GPT_OSS_NOTE
    else:
        built = _mrope(rope, model_type)
        note = MROPE_NOTE if built is not rope else None
    return built, note
