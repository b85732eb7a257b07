"""Where a config keeps its RoPE: the language model's section of a multimodal wrapper (``text_config``), and the
per-layer-type rope sections (which label is the global attention, and each label's head dim)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ropectl import families

ROPE_KEYS = ("rope_theta", "rope_scaling", "rope_parameters", "rotary_dim", "rotary_pct", "rotary_emb_base",
             "partial_rotary_factor", "rope_local_base_freq")


def text_config(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    """Multimodal wrappers keep the language model's settings in ``text_config``."""
    inner = cfg.get("text_config")
    if isinstance(inner, Mapping) and not any(k in cfg for k in ROPE_KEYS):
        return {**inner, "ropectl": cfg.get("ropectl", inner.get("ropectl"))}
    return cfg



def layer_head_dims(cfg: Mapping[str, Any], head_dim: int) -> dict[str, int]:
    """Head dims that ``per_layer_config`` overrides, per layer type (Gemma 4's global layers: 512).

    A config in the hub's form has ``global_head_dim`` instead, from which transformers builds the
    full-attention layers' override itself (``families.GLOBAL_HEAD_DIM_DEFAULT``)."""
    types = list(cfg.get("layer_types") or ())
    default = families.GLOBAL_HEAD_DIM_DEFAULT.get(str(cfg.get("model_type")))
    if cfg.get("per_layer_config") is None and default is not None:
        return {"full_attention": int(cfg.get("global_head_dim") or default)} if "full_attention" in types else {}
    overrides = cfg.get("per_layer_config") or {}
    out: dict[str, int] = {}
    if not isinstance(overrides, Mapping):
        return out
    for key, value in overrides.items():
        if isinstance(value, Mapping) and value.get("head_dim") and str(key).isdigit() and int(key) < len(types):
            out.setdefault(types[int(key)], int(value["head_dim"]))
    return out


def main_label(labels: list[str]) -> str:
    return next((x for x in families.MAIN_LAYER_LABELS if x in labels), None) or next(
        (x for x in labels if "sliding" not in x and "local" not in x), labels[0])
