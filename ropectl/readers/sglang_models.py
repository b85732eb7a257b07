"""What SGLang 0.5.23's model files and rotary classes do beyond the generic get_rope reading of the rope section
(``ropectl.readers.sglang``), read in the sglang 0.5.23 wheel (python/sglang/srt) and run by tests/compat/test_sglang.py:

- ``layers/rotary_embedding/rope_variant.py`` Phi3LongRoPEScaledRotaryEmbedding.forward: the long list for every
  position of the batch once any position exceeds the original length (``torch.any(positions > k)``; the same in
  0.4.10, 0.5.5 and 0.5.15);
- DualChunkRotaryEmbedding, built by get_rope (factory.py) whenever the model file passes dual_chunk_attention_config,
  before the rope section is read; ``layers/attention/dual_chunk_flashattention_backend.py`` is in 0.5.5 to 0.5.19
  and gone from 0.5.20;
- ``models/llama4.py``: ``use_rope = (layer_id + 1) % 4 != 0``, whatever ``no_rope_layers`` says;
- ``models/ministral3.py``: the Llama 4 query temperature with rope_parameters' ``llama_4_scaling_beta`` over
  ``getattr(config, "original_max_position_embeddings", 16384)``, a top-level key Hugging Face configs lack.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ropectl.rope.params import RopeParams

DCA_NOTE = ("but SGLang has had no attention backend for Dual Chunk Attention since 0.5.20 (dual_chunk_flashattention_"
            "backend removed), and on CPU get_rope itself raises (the class hard-codes a CUDA device)")
NOPE_EVERY = 4  # models/llama4.py: use_rope = (layer_id + 1) % 4 != 0
L4_DIVISOR = 16384  # models/ministral3.py: getattr(config, "original_max_position_embeddings", 16384)


def per_batch(rope: RopeParams) -> str | None:
    """How SGLang's choice of LongRoPE list departs from transformers' (None where the lists are equal or the config
    serves no longer than its original length)."""
    original = rope.original_max_position_embeddings
    sc = rope.scaling
    if rope.rope_type != "longrope" or not original or list(sc.get("long_factor") or ()) == list(
            sc.get("short_factor") or ()) or int(rope.max_position_embeddings or 0) <= original:
        return None
    return (f"computes other RoPE per batch: long_factor for every request in a batch once any position in it exceeds "
            f"{original:,} (torch.any(positions > k)), so a short prompt batched with a long one gets the long "
            f"factors; alone, a prompt of {original + 1:,} tokens still gets short_factor, where transformers uses "
            "long_factor")


def attention(f: Any, text: Mapping[str, Any]) -> Any:
    """What SGLang 0.5.23 does with the attention features (``readers.features``)."""
    from ropectl.readers.features import FeatureReading, as_configured, dca_builds

    notes, differs, error = as_configured(f), None, None
    if f.nope_layers and tuple(i for i in range(f.layers) if (i + 1) % NOPE_EVERY == 0) != f.nope_layers:
        differs = (f"applies no RoPE on every {NOPE_EVERY}th layer ((layer_id + 1) % {NOPE_EVERY}, models/llama4.py) "
                   f"whatever no_rope_layers says, and this config marks other layers")
    t = f.temperature
    if t and t.layers == "every layer" and int(text.get("original_max_position_embeddings") or L4_DIVISOR) != t.floor:
        differs = differs or (f"divides the query temperature's positions by {L4_DIVISOR:,} (models/ministral3.py reads "
                              f"a top-level original_max_position_embeddings, else {L4_DIVISOR:,}), not the rope "
                              f"section's {t.floor:,}")
    if f.dual_chunk:
        error = f"{dca_builds(f)}; {DCA_NOTE}"
    return FeatureReading(tuple(notes), differs, error, plain=bool(f.dual_chunk))
