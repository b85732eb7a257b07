"""Per-token negative log-likelihood from the model body's hidden states, never holding full-vocab logits.

The lm_head and cross-entropy run over ``chunk_size`` positions at a time with logits cast to fp32, so
memory for the loss is ``chunk_size x vocab`` floats whatever the sequence length.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

DEFAULT_CHUNK = 1024


def logits_fn(model: Any) -> Callable[[Any], Any]:
    """hidden -> logits exactly as the model's own forward computes them (softcap and scale included)."""
    head = model.get_output_embeddings()
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    softcap = getattr(cfg, "final_logit_softcapping", None)
    scale = getattr(cfg, "logit_scale", None)  # Cohere multiplies
    divide = getattr(cfg, "logits_scaling", None)  # Granite divides

    def apply(hidden: Any) -> Any:
        import torch

        logits = head(hidden.to(head.weight.device))
        if scale is not None:
            logits = logits * scale
        if divide is not None:
            logits = logits / divide
        if softcap is not None:
            logits = torch.tanh(logits / softcap) * softcap
        return logits

    return apply


def token_nll(
    hidden: Any, targets: Any, head: Callable[[Any], Any], chunk_size: int = DEFAULT_CHUNK,
) -> Any:
    """NLL of ``targets[t]`` given ``hidden[t]`` for every t, as an fp32 CPU tensor of shape [T].

    ``hidden`` is [T, H] (the positions that predict), ``targets`` is [T] on any device.
    """
    import torch
    import torch.nn.functional as F

    out = torch.empty(hidden.shape[0], dtype=torch.float32)
    for start in range(0, hidden.shape[0], chunk_size):
        stop = min(start + chunk_size, hidden.shape[0])
        logits = head(hidden[start:stop]).float()
        tgt = targets[start:stop].to(logits.device)
        out[start:stop] = F.cross_entropy(logits, tgt, reduction="none").cpu()
        del logits
    return out


def body_hidden(model: Any, input_ids: Any) -> Any:
    """The last hidden state [T, H] of one sequence, from the decoder body only (no lm_head)."""
    return body_hidden_batch(model, input_ids)[0]


def body_hidden_batch(model: Any, input_ids: Any) -> Any:
    """The last hidden state [B, T, H] of equal-length sequences (no padding, no mask), no lm_head."""
    body = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    output = body(input_ids=input_ids, use_cache=False)
    return output.last_hidden_state


def sequence_nll(model: Any, ids: Any, chunk_size: int = DEFAULT_CHUNK, score_from: int = 0) -> Any:
    """Per-token NLL of ``ids[1:]`` (predictions from position ``score_from`` on), fp32 [len(ids)-1-score_from]."""
    hidden = body_hidden(model, ids[None])
    return token_nll(hidden[score_from:-1], ids[score_from + 1:], logits_fn(model), chunk_size)
