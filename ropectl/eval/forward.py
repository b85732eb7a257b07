"""What every scoring task runs on a loaded model: the decoder body's last hidden states, and hidden -> logits
exactly as the model's own forward computes them. ppl, passkey and the other tasks score from these."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


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


def body_hidden_batch(model: Any, input_ids: Any) -> Any:
    """The last hidden state [B, T, H] of equal-length sequences (no padding, no mask), no lm_head."""
    body = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    output = body(input_ids=input_ids, use_cache=False)
    return output.last_hidden_state
