"""A tiny copy of a text config: the same RoPE, attention and layer-type keys, a few layers and small sizes.

patch's verification runs transformers' own forward on it (``ropectl.patch.forward``), so a written config that the
model cannot run (a rope key its attention reads, dropped) is refused before anything is written. What changes is
only what costs time and memory and plays no part in the position encoding: the number of layers (one of each
distinct kind of layer, by every per-layer list the config has), heads (two, with the head size kept, so the rotary
width is the model's), the MLP and expert sizes, the vocabulary and quantization. Everything else, the rope section,
max_position_embeddings, sliding windows, attention chunks, NoPE layers and temperature keys included, is kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "num_blocks", "depth")
MAX_LAYERS = 4
HEADS = 2
VOCAB = 256
WIDTH = 32  # every MLP / expert / low-rank size
EXPERTS = {"num_local_experts": 4, "num_experts": 4, "n_routed_experts": 4, "moe_num_experts": 4,
           "num_experts_per_tok": 2, "moe_topk": 2, "n_group": 1, "topk_group": 1, "n_shared_experts": 1}
LOW_RANK = ("q_lora_rank", "kv_lora_rank")
DROPPED = ("quantization_config", "auto_map")


def _layer_count(cfg: Mapping[str, Any]) -> tuple[str, int] | None:
    key = next((k for k in LAYER_KEYS if isinstance(cfg.get(k), int) and cfg[k] > 0), None)
    return (key, int(cfg[key])) if key else None


def _is_index_list(value: list[Any], layers: int) -> bool:
    """A list naming layers by index (Llama 4's moe_layers), not one value per layer."""
    return (bool(value) and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < layers for v in value)
            and all(a < b for a, b in zip(value, value[1:])) and (len(value) != layers or value[0] == 0 and
                                                                    value[-1] == layers - 1))


def _chosen_layers(cfg: Mapping[str, Any], layers: int) -> list[int]:
    """One layer of each distinct kind (by every per-layer list), at least two where the model has two."""
    per_layer = [v for v in cfg.values() if isinstance(v, list) and len(v) == layers and not _is_index_list(v, layers)]
    seen: dict[str, int] = {}
    for i in range(layers):
        seen.setdefault(repr([v[i] for v in per_layer]), i)
    chosen = sorted(seen.values())[:MAX_LAYERS]
    for i in range(layers):
        if len(chosen) >= min(2, layers):
            break
        if i not in chosen:
            chosen = sorted([*chosen, i])
    return chosen


def _subset_layers(cfg: dict[str, Any], key: str, layers: int) -> None:
    chosen = _chosen_layers(cfg, layers)
    for name, value in list(cfg.items()):
        if not isinstance(value, list):
            continue
        if _is_index_list(value, layers):
            cfg[name] = [chosen.index(v) for v in value if v in chosen]
        elif len(value) == layers:
            cfg[name] = [value[i] for i in chosen]
    cfg[key] = len(chosen)


def _head_dim(cfg: Mapping[str, Any]) -> int | None:
    if isinstance(cfg.get("head_dim"), int) and cfg["head_dim"] > 0:
        return int(cfg["head_dim"])
    heads, hidden = cfg.get("num_attention_heads"), cfg.get("hidden_size")
    if isinstance(heads, int) and isinstance(hidden, int) and heads > 0:
        return hidden // heads
    return None


def _shrink_heads(cfg: dict[str, Any]) -> None:
    heads, kv = cfg.get("num_attention_heads"), cfg.get("num_key_value_heads")
    head_dim = _head_dim(cfg)
    if not isinstance(heads, int) or head_dim is None:
        return
    grouped = isinstance(kv, int) and kv < heads
    cfg["num_attention_heads"] = HEADS
    if isinstance(kv, int):
        cfg["num_key_value_heads"] = 1 if grouped else HEADS
    if isinstance(cfg.get("hidden_size"), int):
        cfg["hidden_size"] = HEADS * head_dim  # the head size stays the model's, so does the rotary width
    if "head_dim" in cfg and cfg["head_dim"] is not None:
        cfg["head_dim"] = head_dim


def _shrunk(key: str, value: int) -> int:
    """An MLP, expert or low-rank size at most WIDTH, an expert count at most 4 (2 per token)."""
    if key in EXPERTS:
        return min(value, EXPERTS[key])
    if "intermediate_size" in key or "ffn" in key and ("size" in key or "dim" in key) or key in LOW_RANK:
        return min(value, WIDTH)
    if "expert" in key and ("num" in key or key.startswith("n_")):  # LongCat's zero_expert_num, and the like
        return min(value, 2 if "tok" in key or "topk" in key else 4)
    return value


def tiny_text_dict(text: Mapping[str, Any]) -> dict[str, Any]:
    """``text`` (a text config's ``to_dict()``) shrunk as the module docstring says; the caller's dict is kept.
    Sub-configs it holds (a composite's vision or audio tower, a depth decoder) are shrunk the same way."""
    cfg = dict(text)
    for key in DROPPED:
        cfg.pop(key, None)
    for key, value in list(cfg.items()):
        if isinstance(value, Mapping) and _layer_count(value):
            cfg[key] = tiny_text_dict(value)
    counted = _layer_count(cfg)
    if counted:
        _subset_layers(cfg, *counted)
    _shrink_heads(cfg)
    for key, value in list(cfg.items()):
        if isinstance(value, int) and not isinstance(value, bool):
            cfg[key] = _shrunk(key, value)
    if isinstance(cfg.get("vocab_size"), int):
        cfg["vocab_size"] = VOCAB
        for key, value in list(cfg.items()):  # token ids must lie inside the vocabulary (a padding index must)
            if key.endswith("_token_id") or key == "padding_idx":
                if isinstance(value, list):
                    cfg[key] = [v for v in value if isinstance(v, int) and v < VOCAB] or None
                elif isinstance(value, int) and value >= VOCAB:
                    cfg[key] = None
    cfg.update(use_cache=False, dtype="float32", torch_dtype="float32")
    return cfg


def tiny_text_config(config: Any) -> Any:
    """A transformers text config object shrunk as ``tiny_text_dict`` says, of the same class."""
    text = getattr(config, "get_text_config", lambda: config)()
    return type(text).from_dict(tiny_text_dict(text.to_dict()))
