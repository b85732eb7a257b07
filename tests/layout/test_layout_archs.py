"""Every entry of the architecture table matches the tensor names transformers really uses, and --verify passes.

A typo in a pattern would either find no q/k tensors (error) or miss some (the per-layer count below).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ropectl.families.layouts import ARCHS
from ropectl.layout.convert import ConvertSpec, convert_layout
from ropectl.layout.detect import HALF_SPLIT, INTERLEAVED, known_layout

SMALL = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=256, pad_token_id=0, bos_token_id=1, eos_token_id=2)
EXTRA: dict[str, dict] = {
    "gptj": {"rotary_dim": 8},  # keeps the stray num_key_value_heads: GPT-J ignores it, and so must we
    "persimmon": {"qk_layernorm": True},
    "phi": {"qk_layernorm": True},
    "stablelm": {"qk_layernorm": True},
    "cohere": {"use_qk_norm": True},
}


def _config(model_type: str):  # noqa: ANN202 - a transformers config
    from transformers import AutoConfig

    kwargs = {**SMALL, **EXTRA.get(model_type, {})}
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    if model_type == "gemma3":  # multimodal: the vision tower also has q_proj/k_proj, which must be left alone
        vision = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=1, num_attention_heads=2,
                      image_size=28, patch_size=14)
        return AutoConfig.for_model(model_type, text_config=kwargs, vision_config=vision)
    return AutoConfig.for_model(model_type, **kwargs)


def _buildable() -> list[str]:
    """Every table entry transformers can build; kimi_k2 is remote code with DeepSeek-V3's tensors
    (covered through deepseek_v3 here and in test_layout_mla.py)."""
    from transformers import CONFIG_MAPPING

    return sorted(t for t in ARCHS if t in CONFIG_MAPPING)


@pytest.mark.parametrize("model_type", _buildable())
def test_arch_table_entry_converts_and_verifies(model_type: str, tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    src = tmp_path / "src"
    AutoModelForCausalLM.from_config(_config(model_type)).save_pretrained(src)
    cfg = json.loads((src / "config.json").read_text())
    to = HALF_SPLIT if known_layout(cfg)[0] == INTERLEAVED else INTERLEAVED
    result = convert_layout(ConvertSpec(model=str(src), to=to, output=tmp_path / "out", verify=True))
    per_layer = {}
    for name in result.tensors_permuted:
        key = name.rsplit(".", 2)[-2]
        per_layer[key] = per_layer.get(key, 0) + 1
    if ARCHS[model_type].packing == "separate":
        assert per_layer.get("q_proj", 0) >= 2 and per_layer.get("k_proj", 0) >= 2, per_layer  # both layers
    elif ARCHS[model_type].packing == "mla":
        q = per_layer.get("q_b_proj", 0) + per_layer.get("q_proj", 0)
        assert q >= 2 and per_layer.get("kv_a_proj_with_mqa", 0) >= 2, per_layer
    else:
        assert per_layer.get("query_key_value", 0) + per_layer.get("qkv_proj", 0) >= 2, per_layer
    assert result.verify is not None and result.verify.max_rel_error < 1e-9
    if not ARCHS[model_type].gqa:
        assert result.geometry.n_kv_heads == result.geometry.n_heads
    if model_type == "gemma3":
        assert not [n for n in result.tensors_permuted if "vision" in n]
