"""Tiny config.json folders of the families vLLM builds its own way: the published RoPE settings, tiny shapes.

No weights: vLLM's ``ModelConfig`` and model classes, and transformers' rotary classes, need only the config.
Each entry: family -> (config dict, methods to patch with, extra patch flags); ``{src}`` in a flag is the family's
folder, where ``FILES`` puts the family's extra files (Phi-3.5's LongRoPE factors for ``--longrope-file``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TEXT = {"hidden_size": 64, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
        "num_key_value_heads": 1, "head_dim": 32, "vocab_size": 256, "rms_norm_eps": 1e-6}
VISION_QWEN = {"depth": 1, "hidden_size": 32, "intermediate_size": 32, "num_heads": 2, "out_hidden_size": 64,
               "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "in_chans": 3}
SIGLIP = {"hidden_size": 32, "intermediate_size": 32, "num_attention_heads": 2, "num_hidden_layers": 1,
          "image_size": 28, "patch_size": 14, "model_type": "siglip_vision_model", "vision_use_head": False}


def _llama() -> dict[str, Any]:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", **TEXT, "max_position_embeddings": 1024,
            "rope_theta": 10000.0}


def _deepseek_v3() -> dict[str, Any]:
    # DeepSeek-V3's published RoPE (yarn x40 from 4096, mscale 1 / mscale_all_dim 1), with MLA shapes shrunk
    return {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 64,
            "intermediate_size": 64, "moe_intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
            "num_key_value_heads": 2, "n_routed_experts": 4, "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1,
            "first_k_dense_replace": 1, "q_lora_rank": 32, "kv_lora_rank": 32, "qk_nope_head_dim": 16,
            "qk_rope_head_dim": 16, "v_head_dim": 16, "vocab_size": 256, "n_shared_experts": 1,
            "max_position_embeddings": 4096, "rope_theta": 10000,
            "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                             "original_max_position_embeddings": 4096, "type": "yarn"}}


def _gpt_oss() -> dict[str, Any]:
    return {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", **TEXT, "num_attention_heads": 2,
            "num_key_value_heads": 1, "head_dim": 32, "num_local_experts": 4, "num_experts_per_tok": 2,
            "experts_per_token": 2, "layer_types": ["sliding_attention", "full_attention"], "sliding_window": 128,
            "attention_bias": True, "max_position_embeddings": 1024, "initial_context_length": 512,
            "rope_theta": 150000,
            "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 2.0,
                             "original_max_position_embeddings": 512, "rope_type": "yarn", "truncate": False}}


def _qwen2_5_vl() -> dict[str, Any]:
    # the hub form: text settings at the top level, "type": "mrope"
    return {"architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl", **TEXT,
            "max_position_embeddings": 1024, "rope_theta": 1000000.0,
            "rope_scaling": {"type": "mrope", "mrope_section": [4, 6, 6]},
            "vision_config": {**VISION_QWEN, "window_size": 112, "fullatt_block_indexes": [0],
                              "tokens_per_second": 2, "hidden_act": "silu"},
            "image_token_id": 250, "video_token_id": 251, "vision_start_token_id": 252, "vision_end_token_id": 253}


def _qwen3_vl() -> dict[str, Any]:
    text = {"model_type": "qwen3_vl_text", **TEXT, "max_position_embeddings": 1024, "rope_theta": 5000000,
            "rope_scaling": {"rope_type": "default", "mrope_section": [4, 6, 6], "mrope_interleaved": True}}
    return {"architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl", "text_config": text,
            "vision_config": {"depth": 1, "hidden_size": 32, "intermediate_size": 32, "num_heads": 2,
                              "out_hidden_size": 64, "patch_size": 16, "spatial_merge_size": 2,
                              "temporal_patch_size": 2, "num_position_embeddings": 16, "deepstack_visual_indexes": []},
            "image_token_id": 250, "video_token_id": 251, "vision_start_token_id": 252, "vision_end_token_id": 253}


def _qwen3_vl_yarn() -> dict[str, Any]:
    # shipped with YaRN and an explicit attention_factor: a re-extension drops it, and vLLM merges nested overrides
    # key by key, so the emitted section must clear it
    config = _qwen3_vl()
    config["text_config"]["rope_scaling"] = {"rope_type": "yarn", "factor": 2.0, "attention_factor": 0.8,
                                             "original_max_position_embeddings": 512, "mrope_section": [4, 6, 6],
                                             "mrope_interleaved": True}
    return config


def _gemma3() -> dict[str, Any]:
    # gemma-3-4b-it's RoPE: linear x8 on global layers, 10k local base, trained 131072 as published
    text = {"model_type": "gemma3_text", **TEXT, "head_dim": 32, "query_pre_attn_scalar": 32, "sliding_window": 64,
            "layer_types": ["sliding_attention", "full_attention"], "max_position_embeddings": 131072,
            "rope_scaling": {"factor": 8.0, "rope_type": "linear"}}
    return {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "text_config": text,
            "vision_config": SIGLIP, "mm_tokens_per_image": 4, "image_token_index": 250, "boi_token_index": 251,
            "eoi_token_index": 252}


def _mistral3() -> dict[str, Any]:
    text = {"model_type": "mistral", **TEXT, "max_position_embeddings": 1024, "rope_theta": 1000000000.0}
    vision = {"model_type": "pixtral", "hidden_size": 32, "intermediate_size": 32, "num_attention_heads": 2,
              "num_hidden_layers": 1, "head_dim": 16, "image_size": 28, "patch_size": 14, "rope_theta": 10000.0}
    return {"architectures": ["Mistral3ForConditionalGeneration"], "model_type": "mistral3", "text_config": text,
            "vision_config": vision, "image_token_index": 250, "spatial_merge_size": 2,
            "vision_feature_layer": -1, "multimodal_projector_bias": False, "projector_hidden_act": "gelu"}


def _qwen3_5() -> dict[str, Any]:
    # Qwen3.5: hybrid linear / full attention; RoPE (partial, multimodal sections) on the full-attention layers
    text = {"model_type": "qwen3_5_text", **TEXT, "head_dim": 32, "max_position_embeddings": 1024,
            "layer_types": ["linear_attention", "full_attention"], "linear_key_head_dim": 16,
            "linear_value_head_dim": 16, "linear_num_key_heads": 2, "linear_num_value_heads": 2,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25,
                                "mrope_section": [1, 1, 2], "mrope_interleaved": True}}
    return {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", "text_config": text,
            "vision_config": {"depth": 1, "hidden_size": 32, "intermediate_size": 32, "num_heads": 2,
                              "out_hidden_size": 64, "patch_size": 16, "spatial_merge_size": 2,
                              "temporal_patch_size": 2, "num_position_embeddings": 16},
            "image_token_id": 250, "video_token_id": 251, "vision_start_token_id": 252, "vision_end_token_id": 253}


def _llama4() -> dict[str, Any]:
    # Llama 4 Scout's RoPE (llama3 x16 from 8192), interleaved; a NoPE layer every 4th, MoE shrunk
    text = {"model_type": "llama4_text", **TEXT, "head_dim": 32, "num_hidden_layers": 2, "intermediate_size_mlp": 64,
            "num_local_experts": 2, "num_experts_per_tok": 1, "interleave_moe_layer_step": 1,
            "no_rope_layers": [1, 1], "attention_chunk_size": 8192, "max_position_embeddings": 10485760,
            "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0,
                                                     "high_freq_factor": 1.0, "original_max_position_embeddings": 8192}}
    vision = {"model_type": "llama4_vision_model", "hidden_size": 32, "intermediate_size": 32, "num_hidden_layers": 1,
              "num_attention_heads": 2, "image_size": 28, "patch_size": 14, "vision_output_dim": 32,
              "projector_input_dim": 32, "projector_output_dim": 32, "pixel_shuffle_ratio": 0.5}
    return {"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4", "text_config": text,
            "vision_config": vision, "image_token_index": 250}


# Phi-3.5-mini-instruct's published short/long factors (tests/fixtures/configs/phi-3.5-mini-instruct.json, 48 per
# list for head_dim 96), every third one: the 16 a 32-dim head needs, in the published order and range.
PHI35_SHORT = [1.0, 1.03, 1.05, 1.07, 1.16, 1.29, 1.79, 1.88, 1.99, 2.02, 2.02, 2.03, 2.03, 2.03, 2.19, 2.73]
PHI35_LONG = [1.08, 1.34, 1.62, 3.23, 7.7, 17.67, 30.42, 32.93, 50.34, 57.93, 62.61, 63.14, 63.93, 64.03, 64.12, 64.51]


def _phi3_4k() -> dict[str, Any]:
    # Phi-3-mini-4k-instruct's RoPE: plain, theta 10000, 4096 positions, head_dim = hidden / heads
    return {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", **{k: v for k, v in TEXT.items() if k != "head_dim"},
            "num_key_value_heads": 2, "max_position_embeddings": 4096, "rope_theta": 10000.0, "sliding_window": 2047}


def _phi3() -> dict[str, Any]:
    # Phi-3.5-mini-instruct's RoPE as shipped: longrope x32 from 4096 (top-level original_max_position_embeddings)
    return {**_phi3_4k(), "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
            "sliding_window": 262144,
            "rope_scaling": {"type": "longrope", "short_factor": PHI35_SHORT, "long_factor": PHI35_LONG}}


def _qwen2_vl() -> dict[str, Any]:
    # Qwen2-VL-7B-Instruct's hub form: text settings at the top level, "type": "mrope" (sections shrunk to the head)
    return {"architectures": ["Qwen2VLForConditionalGeneration"], "model_type": "qwen2_vl", **TEXT,
            "max_position_embeddings": 32768, "rope_theta": 1000000.0,
            "rope_scaling": {"type": "mrope", "mrope_section": [4, 6, 6]},
            "vision_config": {"depth": 1, "embed_dim": 32, "hidden_size": 64, "num_heads": 2, "mlp_ratio": 1,
                              "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "in_chans": 3},
            "image_token_id": 250, "video_token_id": 251, "vision_start_token_id": 252, "vision_end_token_id": 253}


def _gemma4() -> dict[str, Any]:
    # Gemma 4's RoPE (transformers' Gemma4TextConfig defaults, as published): sliding layers plain 10k; global layers
    # p-RoPE ("proportional", partial_rotary_factor 0.25, theta 1e6) on a wider head. The hub configs name that head
    # "global_head_dim"; transformers 5 saves it as per_layer_config, the form written here (ropectl reads only that
    # one today: on the global_head_dim form its patch verification refuses, 8 vs 16 frequencies)
    text = {"model_type": "gemma4_text", **TEXT, "head_dim": 16, "per_layer_config": {"1": {"head_dim": 32}},
            "sliding_window": 64,
            "layer_types": ["sliding_attention", "full_attention"], "max_position_embeddings": 131072,
            "hidden_size_per_layer_input": 0, "vocab_size_per_layer_input": 256, "num_kv_shared_layers": 0,
            "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                                   "rope_theta": 1000000.0}}}
    vision = {"model_type": "gemma4_vision", "hidden_size": 32, "intermediate_size": 32, "num_hidden_layers": 1,
              "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 16, "patch_size": 16,
              "position_embedding_size": 64}
    return {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4", "text_config": text,
            "vision_config": vision, "audio_config": None, "image_token_id": 250, "boi_token_id": 251,
            "eoi_token_id": 252, "video_token_id": 253}


FAMILIES: dict[str, tuple[Any, tuple[str, ...], tuple[str, ...]]] = {
    "llama": (_llama, ("yarn:2", "linear:2", "llama3:2", "ntk:2"), ()),
    "deepseek_v3": (_deepseek_v3, ("yarn:2", "llama3:2", "linear:2"), ("--replace-existing",)),
    "gpt_oss": (_gpt_oss, ("yarn:4", "ntk:2"), ("--replace-existing",)),
    "qwen2_5_vl": (_qwen2_5_vl, ("yarn:4", "linear:2"), ()),
    "qwen3_vl": (_qwen3_vl, ("yarn:2",), ()),
    "qwen3_vl_yarn": (_qwen3_vl_yarn, ("yarn:4",), ()),
    "gemma3": (_gemma3, ("yarn:2",), ("--replace-existing",)),
    "mistral3": (_mistral3, ("yarn:2", "linear:2"), ()),
    "qwen3_5": (_qwen3_5, ("yarn:2",), ()),
    "llama4": (_llama4, ("llama3:32", "yarn:2"), ("--replace-existing",)),
    "phi3": (_phi3, ("ntk:2",), ("--replace-existing",)),
    "phi3_4k": (_phi3_4k, ("longrope:32",), ("--longrope-file", "{src}/factors.json")),
    "qwen2_vl": (_qwen2_vl, ("yarn:4", "linear:2"), ()),
    "gemma4": (_gemma4, ("proportional:2", "ntk:2"), ()),
}
FILES: dict[str, dict[str, Any]] = {"phi3_4k": {"factors.json": {"short_factor": PHI35_SHORT, "long_factor": PHI35_LONG}}}


def write_family(root: Path, family: str) -> Path:
    folder = root / family
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(FAMILIES[family][0](), indent=1))
    for name, content in FILES.get(family, {}).items():
        (folder / name).write_text(json.dumps(content))
    return folder


def flags(root: Path, family: str) -> list[str]:
    """The family's extra patch flags, ``{src}`` filled in with its folder under ``root``."""
    return [f.replace("{src}", str(root / family)) for f in FAMILIES[family][2]]
