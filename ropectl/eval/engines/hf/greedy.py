"""Greedy continuation on a transformers model: KV-cached decoding, the head only at the last position, and the
teacher-forced NLL of a reference answer along the way."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ropectl.runtime.forward import decoder, logits_fn


def continuation(model: Any, prompt: tuple[int, ...], budget: int, device: Any, eos: set[int],
                 done: Callable[[list[int]], bool] | None = None, answer: tuple[int, ...] = (),
                 on_prefill: Callable[[int], None] | None = None) -> tuple[tuple[int, ...], float]:
    """Greedy decoding of one prompt with the KV cache, the head only at the last position, and the teacher-forced
    NLL of ``answer`` along the way (its tail, once greedy leaves it, from a copy of the cache). The rotary modules
    are restored afterwards: dynamic scaling grows its base as decoding goes on, and the next prompt must start
    from the state the method was put in."""
    import copy

    import torch

    from ropectl.runtime.rotary import kept_rotary

    body = decoder(model)
    head, key = logits_fn(model), cache_keyword(body)
    ids = torch.tensor([list(prompt)], dtype=torch.long, device=device)
    tokens: list[int] = []
    nll, forced, past = 0.0, bool(answer), None
    with torch.inference_mode(), kept_rotary(model):
        for step in range(budget):
            out = body(input_ids=ids, use_cache=True, **{key: past})
            past = getattr(out, key)
            if step == 0 and on_prefill is not None:
                on_prefill(len(prompt))
            logits = head(out.last_hidden_state[0, -1:]).float()[0]
            token = int(logits.argmax())
            tokens.append(token)
            stop = token in eos or (done is not None and done(tokens))
            if forced and step < len(answer):
                nll -= float(torch.log_softmax(logits, -1)[answer[step]])
                if token != answer[step] or stop:  # the rest of the answer, teacher forced, from a copy
                    forced = False
                    nll += _tail_nll(body, head, {key: copy.deepcopy(past)}, answer[step:], device)
            if stop:
                break
            ids = torch.tensor([[token]], dtype=torch.long, device=device)
    return tuple(tokens), nll


def cache_keyword(body: Any) -> str:
    """The KV cache's argument and output name: ``cache`` from transformers 5.24 on, ``past_key_values`` before."""
    import inspect

    return "cache" if "cache" in inspect.signature(body.forward).parameters else "past_key_values"


def _tail_nll(body: Any, head: Any, past: dict[str, Any], chunk: tuple[int, ...], device: Any) -> float:
    """NLL of ``chunk[1:]`` after the cached tokens and ``chunk[0]``: one forward over the chunk."""
    import torch
    import torch.nn.functional as F

    if len(chunk) < 2:
        return 0.0
    ids = torch.tensor([list(chunk)], dtype=torch.long, device=device)
    hidden = body(input_ids=ids, use_cache=True, **past).last_hidden_state[0, :-1]
    return float(F.cross_entropy(head(hidden).float(), ids[0, 1:].to(hidden.device), reduction="sum"))
