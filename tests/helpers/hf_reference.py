"""transformers' own RoPE computation, for comparing ropectl's float64 math against it."""

from __future__ import annotations

from typing import Any

from ropectl.rope.params import RopeParams


def hf_config(params: RopeParams, head_dim: int, heads: int = 4) -> Any:
    from transformers import LlamaConfig

    rope_parameters: dict[str, Any] = {"rope_type": params.rope_type, "rope_theta": params.rope_theta, **params.scaling}
    extra = {}
    if params.rotary_dim != head_dim:
        extra["partial_rotary_factor"] = params.rotary_dim / head_dim
    return LlamaConfig(**extra, hidden_size=head_dim * heads, num_attention_heads=heads, num_key_value_heads=heads,
                       head_dim=head_dim, max_position_embeddings=params.max_position_embeddings,
                       rope_parameters=rope_parameters, vocab_size=32, num_hidden_layers=1)


def hf_frequencies(params: RopeParams, head_dim: int, seq_len: int | None = None) -> tuple[list[float], float]:
    """inv_freq and attention factor exactly as transformers builds them (float32)."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    # GPT-NeoX's default honours partial_rotary_factor; Llama's ignores it.
    from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding

    config = hf_config(params, head_dim)
    if params.rope_type == "default":
        inv, attention = GPTNeoXRotaryEmbedding.compute_default_rope_parameters(config)
    else:
        inv, attention = ROPE_INIT_FUNCTIONS[params.rope_type](config, "cpu", seq_len)
    return inv.double().tolist(), float(attention)


def rotary_embedding_frequencies(model: Any) -> list[tuple[list[float], float]]:
    """(inv_freq, attention_scaling) of every rotary embedding module inside a loaded model."""
    out = []
    for module in model.modules():
        if hasattr(module, "inv_freq") and hasattr(module, "attention_scaling"):
            out.append((module.inv_freq.double().tolist(), float(module.attention_scaling)))
    return out


def max_rel_error(ours: Any, theirs: Any) -> float:
    assert len(ours) == len(theirs), (len(ours), len(theirs))
    return max((abs(a - b) / abs(b) for a, b in zip(ours, theirs)), default=0.0)
