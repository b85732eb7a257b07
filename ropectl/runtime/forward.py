"""A loaded transformers model's forward, as every command runs it: the decoder body's last hidden states and
hidden -> logits exactly as the model's own forward computes them (the evaluation engine scores with them,
finetune's chunked loss trains with them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def logits_fn(model: Any, project: Callable[[Any], Any] | None = None) -> Callable[[Any], Any]:
    """hidden -> logits exactly as the model's own forward computes them (softcap and scale included); ``project``
    replaces the call of the head module (finetune's FSDP calls its ``forward``, outside FSDP's hooks)."""
    head = model.get_output_embeddings()
    project = project or head
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    softcap = getattr(cfg, "final_logit_softcapping", None)
    scale = getattr(cfg, "logit_scale", None)  # Cohere multiplies
    divide = getattr(cfg, "logits_scaling", None)  # Granite divides

    def apply(hidden: Any) -> Any:
        import torch

        logits = project(hidden.to(head.weight.device))
        if scale is not None:
            logits = logits * scale
        if divide is not None:
            logits = logits / divide
        if softcap is not None:
            logits = torch.tanh(logits / softcap) * softcap
        return logits

    return apply


def decoder(model: Any) -> Any:
    """The decoder body (no lm_head) of a causal LM or a vision-language model's language model. A VLM's
    ``get_decoder`` can be its language model with its head still on (Llama 4's Llama4ForCausalLM, whose output is
    logits), or the model itself: the body is then one level further down."""
    body = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    for _ in range(3):  # a head still on (Llama4ForCausalLM's get_decoder returns itself): its .model is the body
        if not hasattr(body, "get_output_embeddings") or body.get_output_embeddings() is None:
            break
        inner = body.get_decoder() if hasattr(body, "get_decoder") else None
        inner = inner if inner is not None and inner is not body else getattr(body, "model", None)
        if inner is None or inner is body:
            break
        body = inner
    return body


def body_hidden_batch(model: Any, input_ids: Any) -> Any:
    """The last hidden state [B, T, H] of equal-length sequences (no padding, no mask), no lm_head."""
    body = decoder(model)
    output = body(input_ids=input_ids, use_cache=False)
    return output.last_hidden_state
