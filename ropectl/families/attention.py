"""The attention features a config names beside its RoPE, read as transformers' config classes read them, and what
they bound: which layers have no RoPE, which slide or attend in chunks, a query temperature, Dual Chunk Attention.

These change what an engine computes for a long prompt without touching the rope section, so every reader
(``ropectl.readers``) says what it does with them, ``inspect`` explains them, and ``length_bounds`` (pure: a config in,
sentences out; recommend can call it where it states a length) says what "serves N tokens" means under them.
Sources, transformers 5.24: Llama4TextConfig (``no_rope_layers``: 0 marks a NoPE layer, default every 4th;
``layer_types``: chunked_attention for RoPE layers when ``attention_chunk_size`` is set; ``attn_temperature_tuning``,
``attn_scale``, ``floor_scale``) and Llama4TextAttention (temperature on NoPE layers only); Ministral3Attention
(``llama_4_scaling_beta`` and ``original_max_position_embeddings`` from rope_parameters, every layer); Qwen2Config
(``sliding_window`` only with ``use_sliding_window``, in every class that has that key); Gemma2/Gemma3TextConfig
(``layer_types`` from the sliding pattern); and Qwen2.5-1M's ``dual_chunk_attention_config``, which no transformers
release reads (vLLM and SGLang do: ``ropectl.readers.vllm`` / ``sglang``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DCA_KEY = "dual_chunk_attention_config"
# Config classes that derive layer_types from a sliding pattern when config.json lists none: every Nth layer is full.
SLIDING_PATTERN = {"gemma2": 2, "gemma3": 6, "gemma3_text": 6}
NOPE_INTERVAL = {"llama4_text": 4, "llama4": 4}  # Llama4TextConfig's no_rope_layer_interval default


@dataclass(frozen=True)
class DualChunk:
    """Dual Chunk Attention (Qwen2.5-1M): queries and keys re-indexed within chunks, so no query-key distance
    exceeds ``chunk_size``; ``original`` is the length the model was trained at."""

    chunk_size: int
    local_size: int
    original: int | None

    @property
    def plain_up_to(self) -> int:
        """The longest prompt whose positions DCA leaves as plain RoPE (one intra chunk: chunk - local)."""
        return self.chunk_size - self.local_size


@dataclass(frozen=True)
class Temperature:
    """A query scale that grows with the position: 1 + scale x ln(1 + floor((p + offset) / floor))."""

    scale: float
    floor: int
    offset: int  # Llama 4 counts p + 1; Ministral 3 counts p
    layers: str  # "NoPE layers" or "every layer"
    keys: str  # the config keys, in words

    def at(self, position: int) -> float:
        return 1 + self.scale * math.log(1 + (position + self.offset) // self.floor)


@dataclass(frozen=True)
class AttentionFeatures:
    layers: int
    dual_chunk: DualChunk | None = None
    nope_layers: tuple[int, ...] = ()  # layers that apply no RoPE
    chunk: int | None = None  # attention_chunk_size: chunked local attention
    chunked_layers: tuple[int, ...] = ()
    window: int | None = None  # sliding window
    sliding_layers: tuple[int, ...] = ()
    temperature: Temperature | None = None

    @property
    def any(self) -> bool:
        return bool(self.dual_chunk or self.nope_layers or self.chunked_layers or self.sliding_layers
                    or self.temperature)


def _layers(cfg: Mapping[str, Any]) -> int:
    value = next((cfg[k] for k in ("num_hidden_layers", "n_layer", "num_layers") if isinstance(cfg.get(k), int)), 0)
    return int(value)


def _layer_types(cfg: Mapping[str, Any], layers: int) -> list[str] | None:
    types = cfg.get("layer_types")
    if isinstance(types, list) and all(isinstance(t, str) for t in types):
        return list(types)
    pattern = SLIDING_PATTERN.get(str(cfg.get("model_type") or ""))
    if pattern and cfg.get("sliding_window"):
        return ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(layers)]
    return None


def _dual_chunk(cfg: Mapping[str, Any]) -> DualChunk | None:
    dca = cfg.get(DCA_KEY)
    if not isinstance(dca, Mapping) or not dca.get("chunk_size"):
        return None
    original = dca.get("original_max_position_embeddings")
    return DualChunk(int(dca["chunk_size"]), int(dca.get("local_size") or 0), int(original) if original else None)


def _nope(cfg: Mapping[str, Any], layers: int) -> tuple[int, ...]:
    flags = cfg.get("no_rope_layers")
    if isinstance(flags, list) and len(flags) == layers:
        return tuple(i for i, f in enumerate(flags) if not f)  # 0 marks a NoPE layer (Llama4TextConfig)
    interval = NOPE_INTERVAL.get(str(cfg.get("model_type") or ""))
    return tuple(i for i in range(layers) if (i + 1) % interval == 0) if interval else ()


def _temperature(cfg: Mapping[str, Any], nope: tuple[int, ...]) -> Temperature | None:
    section = cfg.get("rope_parameters") or cfg.get("rope_scaling")
    beta = section.get("llama_4_scaling_beta") if isinstance(section, Mapping) else None
    if beta is not None and isinstance(section, Mapping) and section.get("original_max_position_embeddings"):
        floor = int(section["original_max_position_embeddings"])
        return Temperature(float(beta), floor, 0, "every layer",
                           f"rope_parameters llama_4_scaling_beta {float(beta):g} / original_max_position_embeddings "
                           f"{floor:,}")
    if cfg.get("attn_temperature_tuning") and nope:
        scale, floor = float(cfg.get("attn_scale", 0.1)), int(cfg.get("floor_scale", 8192))
        return Temperature(scale, floor, 1, "NoPE layers",
                           f"attn_temperature_tuning, attn_scale {scale:g} / floor_scale {floor:,}")
    return None


def attention_features(cfg: Mapping[str, Any]) -> AttentionFeatures:
    """What a text config (``schema.layers.text_config`` of a wrapper) names beside its RoPE."""
    layers = _layers(cfg)
    types = _layer_types(cfg, layers) or []
    nope = _nope(cfg, layers)
    chunk = cfg.get("attention_chunk_size")
    chunked = tuple(i for i, t in enumerate(types) if "chunk" in t)
    if chunk and not chunked and NOPE_INTERVAL.get(str(cfg.get("model_type") or "")):
        chunked = tuple(i for i in range(layers) if i not in nope)  # Llama4TextConfig: RoPE layers are chunked
    window = cfg.get("sliding_window")
    # the config classes that have use_sliding_window (Qwen2's family) apply the window only when it is true
    switched_off = "use_sliding_window" in cfg and not cfg["use_sliding_window"]
    sliding: tuple[int, ...] = ()
    if window and not switched_off:
        listed = tuple(i for i, t in enumerate(types) if "sliding" in t)
        sliding = listed if types else tuple(range(layers))
    return AttentionFeatures(layers, _dual_chunk(cfg), nope, int(chunk) if chunk and chunked else None, chunked,
                             int(window) if sliding else None, sliding, _temperature(cfg, nope))


def _span(layers: tuple[int, ...]) -> str:
    shown = ", ".join(str(i) for i in layers[:6])
    return f"layers {shown}{', ...' if len(layers) > 6 else ''}"


def describe(f: AttentionFeatures) -> list[str]:
    """inspect's lines: each feature with its numbers and the layers it applies to."""
    out = []
    if f.dual_chunk:
        d = f.dual_chunk
        original = f", original {d.original:,}" if d.original else ""
        out.append(f"Dual Chunk Attention ({DCA_KEY}: chunk {d.chunk_size:,}, local {d.local_size:,}{original}): "
                   f"vLLM and SGLang re-index positions within chunks, so no query-key distance exceeds "
                   f"{d.chunk_size:,}, and ignore any rope scaling beside it; transformers and llama.cpp have no DCA "
                   "and run plain RoPE at every position")
    if f.nope_layers:
        out.append(f"{len(f.nope_layers)} of {f.layers} layers apply no RoPE (no_rope_layers: "
                   f"{_span(f.nope_layers)}): a scaling changes only the other {f.layers - len(f.nope_layers)}")
    if f.chunked_layers and f.chunk:
        out.append(f"chunked attention (attention_chunk_size {f.chunk:,}) on {len(f.chunked_layers)} of {f.layers} "
                   f"layers: each token attends only within its {f.chunk:,}-token chunk there")
    if f.sliding_layers and f.window:
        out.append(f"sliding window {f.window:,} on {len(f.sliding_layers)} of {f.layers} layers: each token attends "
                   f"to the last {f.window:,} tokens only there")
    if f.temperature:
        t = f.temperature
        first = t.floor - t.offset  # the first position whose scale exceeds 1
        out.append(f"query temperature on {t.layers} ({t.keys}): x{t.at(0):g} below position {first:,}, "
                   f"x{t.at(first):.4g} from {first:,}, x{t.at(16 * t.floor):.4g} at {16 * t.floor:,}")
    return out


def length_bounds(f: AttentionFeatures, length: int | None) -> list[str]:
    """What "serves ``length`` tokens" means under these features: which layers see the whole prompt, and where
    engines stop computing plain RoPE. Empty where nothing bounds it."""
    if not length:
        return []
    out = []
    if f.sliding_layers and f.window and f.window < length:
        rest = f.layers - len(f.sliding_layers)
        whole = (f"only the other {rest} attend across the whole prompt" if rest else
                 f"no layer attends further back than {f.window:,} tokens")
        out.append(f"at {length:,} tokens, {len(f.sliding_layers)} of {f.layers} layers see only the last "
                   f"{f.window:,} tokens (sliding window); {whole}")
    if f.chunked_layers and f.chunk and f.chunk < length:
        rest = f.layers - len(f.chunked_layers)
        out.append(f"at {length:,} tokens, {len(f.chunked_layers)} of {f.layers} layers attend only within "
                   f"{f.chunk:,}-token chunks (chunked attention); "
                   + (f"only the other {rest} (NoPE) attend across chunks" if rest else "no layer attends across "
                      "chunks"))
    d = f.dual_chunk
    if d and length > d.plain_up_to:
        trained = f", past the trained {d.original:,}" if d.original and length > d.original else ""
        out.append(f"at {length:,} tokens, Dual Chunk Attention (vLLM, SGLang) no longer computes plain RoPE "
                   f"(beyond {d.plain_up_to:,}: positions re-indexed per chunk, no distance above {d.chunk_size:,}), "
                   f"while transformers and llama.cpp run plain RoPE there{trained}")
    return out
