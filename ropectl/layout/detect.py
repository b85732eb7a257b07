"""Which q/k layout a checkpoint's weights are in, as far as its format tells."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ropectl.schema.record import Record

INTERLEAVED = "interleaved"
HALF_SPLIT = "half-split"
LAYOUTS = (INTERLEAVED, HALF_SPLIT)

# HF model types whose attention pairs dimensions (2i, 2i+1) in the weights as stored.
INTERLEAVED_MODEL_TYPES = frozenset({
    "gptj", "codegen", "cohere", "cohere2", "glm", "glm4", "helium", "ernie4_5", "moonshine", "llama4",
    "deepseek_v2",
})


def known_layout(cfg: Mapping[str, Any]) -> tuple[str, str]:
    """(layout, reason). The layout ropectl recorded wins, then format flags, then the model type."""
    record = Record.of(cfg)
    if record.layout in LAYOUTS:
        return record.layout, record.layout_source or "recorded by ropectl in config.json"
    if cfg.get("rope_interleave"):
        return INTERLEAVED, "config sets rope_interleave=true"
    model_type = str(cfg.get("model_type") or "")
    if model_type in INTERLEAVED_MODEL_TYPES:
        return INTERLEAVED, f"HF '{model_type}' rotates pairs (2i, 2i+1)"
    if not model_type:
        return HALF_SPLIT, "no model_type: assumed rotate_half, pairs (i, i+d/2), as in most HF models"
    return HALF_SPLIT, f"HF '{model_type}' uses rotate_half, pairs (i, i+d/2)"
