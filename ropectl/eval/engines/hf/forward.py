"""The transformers engine's forward: the decoder body's last hidden states, hidden -> logits exactly as the model's
own forward computes them, and teacher forcing with the head only at the answer positions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ropectl.eval.engines.requests import AnswerScore


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


def teacher_forced(model: Any, rows: list[list[int]], answer_lens: list[int], device: Any) -> list[AnswerScore]:
    """Rows of one length share a forward (equal lengths: no padding, each row is its batch-1 self), each ending in
    its answer; the head runs only over the positions that predict the answer, so no [length, vocab] logits."""
    import torch
    import torch.nn.functional as F

    if len({len(r) for r in rows}) != 1:
        raise ValueError("a batch must hold trials of one length")
    ids = torch.tensor(rows, dtype=torch.long, device=device)
    head = logits_fn(model)
    out = []
    with torch.inference_mode():
        hidden = body_hidden_batch(model, ids)
        for row, k in enumerate(answer_lens):
            n = len(rows[row])
            logits = head(hidden[row, n - 1 - k:n - 1]).float()
            target = ids[row, n - k:].to(logits.device)
            nll = float(F.cross_entropy(logits, target, reduction="sum"))
            picked = torch.log_softmax(logits, -1).gather(-1, target[:, None])[:, 0]
            out.append(AnswerScore(tuple(int(x) for x in logits.argmax(-1)), tuple(float(x) for x in picked), nll))
    return out


def end_tokens(model: Any, tokenizer: Any) -> set[int]:
    """The ids greedy decoding stops at: the generation config's end-of-sequence ids and the tokenizer's."""
    config = getattr(model, "generation_config", None)
    ids = getattr(config, "eos_token_id", None)
    out = set(ids if isinstance(ids, (list, tuple)) else ([] if ids is None else [ids]))
    if getattr(tokenizer, "eos_token_id", None) is not None:
        out.add(int(tokenizer.eos_token_id))
    return out
