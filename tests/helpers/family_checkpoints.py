"""Tiny seeded random checkpoints of the model families beyond Llama: MLA, MoE with head_dim null, p-RoPE, mrope."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.helpers.checkpoints import VOCAB, save_model


def tiny_deepseek_v3(folder: Path, seed: int = 11, **overrides: Any) -> Path:
    """MLA: q heads of nope 8 + rope 8 rows, one shared 8-row rope key in kv_a_proj_with_mqa, interleaved pairs."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    kwargs = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, moe_intermediate_size=16,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=16,
                  kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8, n_routed_experts=4,
                  num_experts_per_tok=2, n_group=1, topk_group=1, first_k_dense_replace=1,
                  max_position_embeddings=256, rope_interleave=True)
    kwargs.update(overrides)
    return save_model(DeepseekV3ForCausalLM, DeepseekV3Config(**kwargs), folder, seed)


def tiny_mixtral(folder: Path, seed: int = 12, **overrides: Any) -> Path:
    """Mixtral as published: "head_dim": null in config.json (transformers derives hidden / heads)."""
    from transformers import MixtralConfig, MixtralForCausalLM

    kwargs = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
                  max_position_embeddings=256, rope_theta=1e6)
    kwargs.update(overrides)
    path = save_model(MixtralForCausalLM, MixtralConfig(**kwargs), folder, seed)
    config = json.loads((path / "config.json").read_text())
    config["head_dim"] = None
    (path / "config.json").write_text(json.dumps(config, indent=2))
    return path


def tiny_gemma4_text(folder: Path, seed: int = 13, **overrides: Any) -> Path:
    """Gemma 4 text: sliding layers default RoPE, global layers p-RoPE (partial 0.25) with a wider head."""
    from transformers import Gemma4ForCausalLM, Gemma4TextConfig

    kwargs = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=2, num_key_value_heads=1, head_dim=16, global_head_dim=32,
                  layer_types=["sliding_attention", "full_attention"], sliding_window=64,
                  max_position_embeddings=256, hidden_size_per_layer_input=0, vocab_size_per_layer_input=VOCAB)
    kwargs.update(overrides)
    return save_model(Gemma4ForCausalLM, Gemma4TextConfig(**kwargs), folder, seed)


def tiny_qwen2_vl_text(folder: Path, seed: int = 14, vision: dict[str, Any] | None = None, **overrides: Any) -> Path:
    """Qwen2-VL's text model: multimodal RoPE sections (mrope_section) over a 16-dim head."""
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    text = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2,
                num_key_value_heads=1, max_position_embeddings=256,
                rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [2, 3, 3]})
    text.update(overrides)
    vision = {**dict(depth=1, embed_dim=16, hidden_size=32, num_heads=2, mlp_ratio=1, patch_size=2,
                     spatial_merge_size=1, temporal_patch_size=1), **(vision or {})}
    return save_model(Qwen2VLForConditionalGeneration, Qwen2VLConfig(text_config=text, vision_config=vision), folder, seed)


def tiny_ministral3(folder: Path, seed: int = 15, **overrides: Any) -> Path:
    """Ministral 3's text model as published (tests/fixtures/configs/ministral-3-8b.json: yarn x16 from 16384 with
    llama_4_scaling_beta in rope_parameters), with a 16-dim head and tiny sizes."""
    from transformers import Ministral3Config, Ministral3ForCausalLM

    published = json.loads((Path(__file__).parents[1] / "fixtures" / "configs" / "ministral-3-8b.json").read_text())
    text = {**published["text_config"], **dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48,
                                                 num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                                                 head_dim=16)}
    text.update(overrides)
    return save_model(Ministral3ForCausalLM, Ministral3Config(**text), folder, seed)
