"""The compat tier's checkpoints: tiny configs of each architecture, patched by ropectl every way it can.

Configs are written in the v4 form most published checkpoints still use; the weights are random
(the runner builds the model from the config), so only config.json is needed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TRAINED = 64
LONG = 4 * TRAINED
LENGTHS = (8, LONG)

_COMMON = dict(vocab_size=64, hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=TRAINED, torch_dtype="float32", tie_word_embeddings=False)

ARCHS: dict[str, dict[str, Any]] = {
    "llama": {**_COMMON, "model_type": "llama", "architectures": ["LlamaForCausalLM"], "head_dim": 16,
              "rope_theta": 10000.0},
    "qwen2": {**_COMMON, "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "rope_theta": 1e6,
              "use_sliding_window": False},
    "mistral": {**_COMMON, "model_type": "mistral", "architectures": ["MistralForCausalLM"], "rope_theta": 1e6,
                "sliding_window": None},
    "phi3": {**_COMMON, "model_type": "phi3", "architectures": ["Phi3ForCausalLM"], "rope_theta": 10000.0,
             "original_max_position_embeddings": TRAINED, "pad_token_id": 0},
    "phi3p": {**_COMMON, "model_type": "phi3", "architectures": ["Phi3ForCausalLM"], "rope_theta": 10000.0,
              "original_max_position_embeddings": TRAINED, "pad_token_id": 0, "partial_rotary_factor": 0.5},
    "neox": {**_COMMON, "model_type": "gpt_neox", "architectures": ["GPTNeoXForCausalLM"], "num_attention_heads": 2,
             "rotary_pct": 0.25, "rotary_emb_base": 10000, "use_parallel_residual": True},
    "gemma3": {**_COMMON, "model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"], "head_dim": 16,
               "rope_theta": 1e6, "rope_local_base_freq": 1e4, "sliding_window": 16, "sliding_window_pattern": 2,
               "layer_types": ["sliding_attention", "full_attention"], "query_pre_attn_scalar": 16,
               "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0},
    # Families whose engines build RoPE their own way (vLLM's deepseek_yarn, gpt-oss's YaRN, mrope): transformers
    # itself must still compute what ropectl says, or patch must name the version.
    "deepseek_v3": {**_COMMON, "model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"],
                    "num_key_value_heads": 4, "moe_intermediate_size": 32, "kv_lora_rank": 16, "q_lora_rank": 16,
                    "qk_rope_head_dim": 16, "qk_nope_head_dim": 16, "v_head_dim": 16, "n_routed_experts": 4,
                    "num_experts_per_tok": 2, "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1,
                    "rope_theta": 10000.0},
    "gpt_oss": {**_COMMON, "model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"], "head_dim": 16,
                "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 16, "rope_theta": 10000.0,
                "layer_types": ["sliding_attention", "full_attention"]},
}
for _cfg in ARCHS.values():
    _cfg.pop("num_key_value_heads") if _cfg["model_type"] == "gpt_neox" else None

METHODS: tuple[tuple[str, float], ...] = (
    ("linear", 4.0), ("ntk", 4.0), ("dynamic", 4.0), ("yarn", 4.0), ("llama3", 4.0), ("longrope", 4.0),
    ("yarn", 3.3), ("linear", 3.3),
)
SCHEMAS = ("both", "v4", "v5")


@dataclass(frozen=True)
class Case:
    name: str
    arch: str
    folder: Path | None  # None: ropectl refused the patch
    config: dict[str, Any] = field(default_factory=dict)
    expected: dict[str, Any] = field(default_factory=dict)  # layer -> RopeParams ropectl says it wrote
    warnings: tuple[str, ...] = ()
    refused: str | None = None


def _rotary_half(cfg: dict[str, Any]) -> int:
    head = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    partial = cfg.get("partial_rotary_factor") or cfg.get("rotary_pct") or 1.0
    return int(head * partial) // 2


def _options(method: str, cfg: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    if method != "longrope":
        return ()
    half = _rotary_half(cfg)
    return (("short_factor", [1.0 + 0.01 * i for i in range(half)]),
            ("long_factor", [1.0 + 0.5 * i for i in range(half)]))


def build(root: Path) -> list[Case]:
    from ropectl.errors import RopectlError
    from ropectl.patch import PatchSpec, patch_checkpoint, plan_config
    from ropectl.patch.verify import expected_ropes
    from ropectl.rope.methods import MethodSpec

    cases = []
    for arch, cfg in ARCHS.items():
        source = root / "src" / arch
        source.mkdir(parents=True, exist_ok=True)
        (source / "config.json").write_text(json.dumps(cfg, indent=2))
        cases.append(Case(f"{arch}-unpatched", arch, source, cfg,
                          expected_ropes(*_plan_none(cfg)), ()))
        for (method, factor) in METHODS:
            for schema in SCHEMAS:
                name = f"{arch}-{method}{factor:g}-{schema}"
                spec = MethodSpec(method, factor, _options(method, cfg))
                out = root / name
                try:
                    plan = plan_config(cfg, spec, schema=schema)
                    result = patch_checkpoint(PatchSpec(model=str(source), method=spec, output=out, schema=schema))
                except RopectlError as exc:
                    cases.append(Case(name, arch, None, refused=str(exc)))
                    continue
                config = json.loads((out / "config.json").read_text())
                cases.append(Case(name, arch, out, config, expected_ropes(plan.rope, plan.layer_ropes),
                                  tuple(result.warnings)))
    return cases


def _plan_none(cfg: dict[str, Any]) -> tuple[Any, Any]:
    from ropectl.schema.read import read_model_rope

    model = read_model_rope(cfg)
    return model.rope, dict(model.layer_ropes)


def names() -> list[str]:
    """Case names, known at collection time (before anything is patched)."""
    out = []
    for arch in ARCHS:
        out.append(f"{arch}-unpatched")
        out += [f"{arch}-{m}{f:g}-{s}" for m, f in METHODS for s in SCHEMAS]
    return out
