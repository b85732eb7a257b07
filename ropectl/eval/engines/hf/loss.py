"""Per-token negative log-likelihood from the model body's hidden states, never holding full-vocab logits.

The lm_head and cross-entropy run over ``chunk_size`` positions at a time with logits cast to fp32, so
memory for the loss is ``chunk_size x vocab`` floats whatever the sequence length.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ropectl.runtime.forward import body_hidden_batch, logits_fn

DEFAULT_CHUNK = 1024


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


def sequence_nll(model: Any, ids: Any, chunk_size: int = DEFAULT_CHUNK, score_from: int = 0) -> Any:
    """Per-token NLL of ``ids[1:]`` (predictions from position ``score_from`` on), fp32 [len(ids)-1-score_from]."""
    hidden = body_hidden_batch(model, ids[None])[0]
    return token_nll(hidden[score_from:-1], ids[score_from + 1:], logits_fn(model), chunk_size)


def batch_nll(model: Any, rows: list[Any], score_from: list[int], device: Any, chunk_size: int = DEFAULT_CHUNK,
              ) -> list[Any]:
    """Per row (token lists of one length), the per-token NLL of its tokens from ``score_from + 1`` on: one forward,
    no padding, each row its batch-1 self."""
    import torch

    ids = torch.stack([torch.as_tensor(r, dtype=torch.long) for r in rows]).to(device)
    head = logits_fn(model)
    with torch.inference_mode():
        hidden = body_hidden_batch(model, ids)
        out = [token_nll(hidden[row, s:-1], ids[row, s + 1:], head, chunk_size) for row, s in enumerate(score_from)]
        del hidden
    return out
