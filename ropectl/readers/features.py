"""The attention features a config names beside its RoPE (``families.attention``), as the readers report them.

Each engine module reads the features itself (what it does with Dual Chunk Attention, NoPE layers, chunked attention,
a query temperature) and returns a ``FeatureReading``; ``with_features`` puts it into the engine's ``Reading``, so
``inspect --engines`` and patch's warnings show it, and a feature that makes an engine compute otherwise is a
difference, never a silent "same". The sentences every engine that follows the config shares are here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ropectl.families.attention import DCA_KEY, AttentionFeatures, attention_features
from ropectl.readers.base import Reading


@dataclass(frozen=True)
class FeatureReading:
    notes: tuple[str, ...] = ()  # what the engine does with each feature where it computes what the config says
    differs: str | None = None  # how a feature makes it compute otherwise than transformers (not as frequencies)
    error: str | None = None  # a feature that stops it loading the model
    plain: bool = False  # it ignores the rope section's scaling (Dual Chunk Attention's rotary takes theta only)


def features_of(config: Mapping[str, Any]) -> AttentionFeatures:
    from ropectl.schema.layers import text_config

    return attention_features(text_config(config))


def as_configured(f: AttentionFeatures) -> list[str]:
    """The features an engine applies as the config says them (transformers' reading, which the others copy)."""
    out = []
    if f.nope_layers:
        out.append(f"no RoPE on the {len(f.nope_layers)} layers no_rope_layers marks 0 (of {f.layers})")
    if f.chunked_layers and f.chunk:
        out.append(f"chunked attention: {len(f.chunked_layers)} layers attend within {f.chunk:,}-token chunks")
    if f.temperature:
        t = f.temperature
        where = "(position + 1)" if t.offset else "position"
        out.append(f"query temperature on {t.layers}: 1 + {t.scale:g} ln(1 + floor({where} / {t.floor:,})) ({t.keys})")
    return out


def no_dca(engine: str, f: AttentionFeatures) -> str:
    """An engine without Dual Chunk Attention: the key is not read, plain RoPE runs at every position."""
    d = f.dual_chunk
    assert d is not None
    past = f", past the trained {d.original:,} too" if d.original else ""
    return f"{engine} has no Dual Chunk Attention: {DCA_KEY} is not read, plain RoPE runs at every position{past}"


def dca_builds(f: AttentionFeatures) -> str:
    """What vLLM's and SGLang's get_rope do with the key, in both engines' words."""
    d = f.dual_chunk
    assert d is not None
    return (f"get_rope builds DualChunkRotaryEmbedding (chunk_size {d.chunk_size:,}, local_size {d.local_size:,}) "
            f"whenever {DCA_KEY} is set and ignores the rope section beside it but rope_theta: plain RoPE up to "
            f"{d.plain_up_to:,} tokens, then positions re-indexed per chunk (no query-key distance above "
            f"{d.chunk_size:,})")


def with_features(reading: Reading, found: FeatureReading) -> Reading:
    """``reading`` with the features' notes, difference or error (an existing error stays first)."""
    if not (found.notes or found.differs or found.error or found.plain):
        return reading
    ropes = dict(reading.ropes)
    if found.plain:  # DCA's rotary is built from rope_theta alone
        ropes = {k: p.with_(rope_type="default", scaling={}) for k, p in ropes.items()}
    return replace(reading, ropes=ropes, attention=tuple(dict.fromkeys((*reading.attention, *found.notes))),
                   also_differs=reading.also_differs or found.differs, error=reading.error or found.error)
