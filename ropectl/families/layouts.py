"""Which tensors of each architecture carry rotary q/k rows, and how they are packed. Data, not an if-chain.

A *packing* says how the q and k projections sit inside one stored tensor:

- ``separate``: ``q_proj`` has ``n_heads * head_dim`` rows, ``k_proj`` ``n_kv_heads * head_dim`` (Llama family).
- ``neox_fused_per_head``: ``query_key_value`` rows are ``view(n_heads, 3, head_dim)``, slots q, k, v (GPT-NeoX).
- ``phi3_fused_qkv``: ``qkv_proj`` rows are ``[Q n_heads*hd | K n_kv*hd | V n_kv*hd]`` (Phi-3).
- ``mla``: multi-head latent attention (DeepSeek-V2/V3, Kimi K2): ``q_b_proj`` (or ``q_proj``) heads are
  ``[nope | rope]`` with the rotary ``qk_rope_head_dim`` rows last; ``kv_a_proj_with_mqa`` is
  ``[kv_lora_rank | rope]``, one rotary key head shared by all query heads. Only the rope rows move.

Norm weights applied to q or k before RoPE (Qwen3 ``q_norm``, OLMo-2 full-width ``q_norm``, StableLM per-head
``q_layernorm``) are elementwise, so they get the same per-head permutation; their head count is numel / head_dim.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ropectl.errors import LayoutError

SEPARATE = "separate"
NEOX_FUSED = "neox_fused_per_head"
PHI3_FUSED = "phi3_fused_qkv"
MLA = "mla"


@dataclass(frozen=True)
class Arch:
    """Tensor-name patterns (regular expressions searched in the full tensor name) for one model type."""

    packing: str
    rotary: str  # which config key sets the rotary part of a head (read by read_model_rope)
    q: str | None = r"\.q_proj\.(weight|bias)$"
    k: str | None = r"\.k_proj\.(weight|bias)$"
    qkv: str | None = None
    q_norm: str | None = None
    k_norm: str | None = None
    gqa: bool = True  # False: one key head per query head, whatever a stray num_key_value_heads says
    # Vision and audio towers reuse q_proj/k_proj names but apply no (or another) RoPE.
    exclude: str = r"(^|\.)(vision|visual|vision_tower|vision_model|audio|audio_tower|multi_modal_projector)\b"


_FULL = "full head"
_LLAMA = Arch(SEPARATE, _FULL)
_QK_NORM = Arch(SEPARATE, _FULL, q_norm=r"\.q_norm\.weight$", k_norm=r"\.k_norm\.weight$")
_PARTIAL = "partial_rotary_factor"
_PHI = Arch(SEPARATE, _PARTIAL, q_norm=r"\.q_layernorm\.(weight|bias)$", k_norm=r"\.k_layernorm\.(weight|bias)$")

_MLA = Arch(MLA, "qk_rope_head_dim", q=r"\.(q_b_proj|q_proj)\.weight$", k=r"\.kv_a_proj_with_mqa\.weight$")

ARCHS: Mapping[str, Arch] = {
    "llama": _LLAMA,
    "mistral": _LLAMA,
    "mixtral": _LLAMA,
    "qwen2": _LLAMA,
    "qwen2_moe": _LLAMA,
    "granite": _LLAMA,
    "olmo": _LLAMA,
    "starcoder2": _LLAMA,
    "smollm3": _LLAMA,
    "gemma": _LLAMA,
    "gemma2": _LLAMA,
    "helium": _LLAMA,
    "ernie4_5": _LLAMA,
    "qwen3": _QK_NORM,
    "qwen3_moe": _QK_NORM,
    "gemma3": _QK_NORM,
    "gemma3_text": _QK_NORM,
    "olmo2": _QK_NORM,
    "exaone4": _QK_NORM,
    "cohere": _QK_NORM,
    "cohere2": _QK_NORM,
    "glm": Arch(SEPARATE, _PARTIAL),
    "glm4": Arch(SEPARATE, _PARTIAL),
    "phi": _PHI,
    "stablelm": Arch(SEPARATE, _PARTIAL, q_norm=r"\.q_layernorm\.norms\.\d+\.(weight|bias)$",
                     k_norm=r"\.k_layernorm\.norms\.\d+\.(weight|bias)$"),
    "gptj": Arch(SEPARATE, "rotary_dim", gqa=False),
    "gpt_neox": Arch(NEOX_FUSED, "rotary_pct", q=None, k=None, qkv=r"\.query_key_value\.(weight|bias)$", gqa=False),
    "persimmon": Arch(NEOX_FUSED, _PARTIAL, q=None, k=None, qkv=r"\.query_key_value\.(weight|bias)$",
                      q_norm=r"\.q_layernorm\.(weight|bias)$", k_norm=r"\.k_layernorm\.(weight|bias)$", gqa=False),
    "phi3": Arch(PHI3_FUSED, _PARTIAL, q=None, k=None, qkv=r"\.qkv_proj\.(weight|bias)$"),
    "deepseek_v2": _MLA,
    "deepseek_v3": _MLA,
    "kimi_k2": _MLA,
}

# Head-sized row blocks per stored tensor, as multiples of (n_heads, n_kv_heads): rows = units * head_dim.
UNITS: Mapping[tuple[str, str], tuple[int, int]] = {
    (SEPARATE, "q"): (1, 0),
    (SEPARATE, "k"): (0, 1),
    (NEOX_FUSED, "qkv"): (3, 0),
    (PHI3_FUSED, "qkv"): (1, 2),
}


def arch_for(cfg: Mapping[str, Any]) -> tuple[str, Arch]:
    """(model_type, Arch) for a config; multimodal wrappers fall back to their text_config's type."""
    inner = cfg.get("text_config") if isinstance(cfg.get("text_config"), Mapping) else {}
    for model_type in (str(cfg.get("model_type") or ""), str(inner.get("model_type") or "")):
        if model_type in ARCHS:
            return model_type, ARCHS[model_type]
    shown = cfg.get("model_type") or "none"
    raise LayoutError(
        f"convert-layout does not know where the q/k rows of model type '{shown}' are",
        f"supported model types: {', '.join(sorted(ARCHS))}",
    )


def role_of(arch: Arch, name: str) -> str | None:
    """'q', 'k', 'qkv', 'q_norm' or 'k_norm' for a tensor that holds rotary rows, else None."""
    if re.search(arch.exclude, name):
        return None
    for role in ("q", "k", "qkv", "q_norm", "k_norm"):
        pattern = getattr(arch, role)
        if pattern and re.search(pattern, name):
            return role
    return None


def layer_of(name: str) -> int | None:
    """The decoder layer number in a tensor name (``model.layers.3.self_attn...`` -> 3)."""
    match = re.search(r"\.(?:layers|h|blocks|layer)\.(\d+)\.", "." + name)
    return int(match.group(1)) if match else None
