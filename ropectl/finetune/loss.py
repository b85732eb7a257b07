"""The training loss without [sequence, vocab] logits: the decoder body once, then lm_head + cross-entropy in chunks,
each chunk under ``torch.utils.checkpoint`` so its logits are freed after the forward and recomputed in backward.

The value is the mean next-token cross-entropy over every position of the batch, exactly what transformers'
``model(labels=input_ids).loss`` computes (fp32 logits, shifted labels); the gradient is that loss's gradient
(tests/finetune/test_loss.py checks both against transformers). Peak memory for the loss is one chunk's logits
(``chunk_size x vocab`` fp32) whatever the length. The evaluation engine's chunked NLL (``eval/engines/hf/loss.py``)
runs under ``inference_mode`` and cannot train, so this is its training twin; the head itself is the engine's
``logits_fn`` (softcapping and logit scales included).

The forward goes through the (possibly DDP-wrapped) model with ``logits_to_keep=1``, so data parallelism sees an
ordinary forward; a hook on the decoder body keeps its last hidden state for the chunked head.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ropectl.eval.engines.hf.forward import decoder, logits_fn

DEFAULT_CHUNK = 1024  # positions per lm_head chunk: 1024 x 49k vocab x 4 bytes = 200 MB of logits at most


@contextlib.contextmanager
def captured_hidden(model: Any) -> Iterator[dict[str, Any]]:
    """While open, ``box["hidden"]`` is the decoder body's last hidden state [B, T, H] of the latest forward."""
    box: dict[str, Any] = {}

    def keep(module: Any, args: Any, output: Any) -> None:
        box["hidden"] = output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0]

    handle = decoder(model).register_forward_hook(keep)
    try:
        yield box
    finally:
        handle.remove()


def chunked_loss(hidden: Any, input_ids: Any, head: Callable[[Any], Any], chunk_size: int = DEFAULT_CHUNK) -> Any:
    """Mean cross-entropy of ``input_ids[:, 1:]`` given ``hidden[:, :-1]``, one checkpointed chunk at a time."""
    from torch.utils.checkpoint import checkpoint

    h = hidden[:, :-1].reshape(-1, hidden.shape[-1])
    targets = input_ids[:, 1:].reshape(-1).to(h.device)
    total = None
    for start in range(0, h.shape[0], chunk_size):
        part = checkpoint(_chunk_sum, h[start:start + chunk_size], targets[start:start + chunk_size], head,
                          use_reentrant=False)
        total = part if total is None else total + part
    return total / h.shape[0]


def _chunk_sum(hidden: Any, targets: Any, head: Callable[[Any], Any]) -> Any:
    import torch.nn.functional as F

    return F.cross_entropy(head(hidden).float(), targets, reduction="sum")


def training_loss(model: Any, inner: Any, batch: Mapping[str, Any], chunk_size: int = DEFAULT_CHUNK) -> Any:
    """The loss of ``batch`` (input_ids, optional position_ids) through ``model`` (DDP-wrapped or not), whose
    unwrapped causal LM (a PreTrainedModel or a peft model) is ``inner``."""
    kwargs = {k: v for k, v in batch.items() if k in ("input_ids", "position_ids")}
    if "position_ids" in kwargs:
        # Without a mask, transformers 5 reads any position jump as the start of another packed sequence
        # (masking_utils.find_packed_sequence_indices) and cuts attention there: PoSE's chunk 2 would never see
        # chunk 1. An explicit all-ones mask says every token is one sequence.
        import torch

        kwargs["attention_mask"] = torch.ones_like(kwargs["input_ids"])
    with captured_hidden(inner) as box:
        try:
            model(**kwargs, use_cache=False, logits_to_keep=1)
        except TypeError as exc:  # a model class without logits_to_keep: its full logits are computed and dropped
            if "logits_to_keep" not in str(exc):
                raise
            model(**kwargs, use_cache=False)
    return chunked_loss(box["hidden"], batch["input_ids"], logits_fn(inner), chunk_size)
