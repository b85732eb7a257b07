"""What every scoring task runs on a loaded model: the decoder body's last hidden states, hidden -> logits exactly
as the model's own forward computes them, and greedy continuation. ppl, passkey and the other tasks score from
these."""

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


def answers(engine: Any, trials: list[Any]) -> list[tuple[tuple[int, ...], float]]:
    """Per trial (``ids`` of ``length`` tokens ending in ``answer_len`` answer tokens): the argmax at each answer
    position and the answer's NLL. transformers: one batched forward here; another engine (vLLM): its own
    ``teacher_forced(prompts, answer_starts)``, from prompt log-probs."""
    from ropectl.eval.engines import DEFAULT_ENGINE

    if engine.name != DEFAULT_ENGINE:
        return [(tuple(p), float(nll)) for p, nll in
                engine.teacher_forced([list(t.ids) for t in trials], [t.length - t.answer_len for t in trials])]
    return teacher_forced(engine.model, trials, engine.input_device())


def teacher_forced(model: Any, trials: list[Any], device: Any) -> list[tuple[tuple[int, ...], float]]:
    """Trials of one length share a forward (equal lengths: no padding, each row is its batch-1 self); the head runs
    only over the positions that predict each trial's answer, so no [length, vocab] logits."""
    import torch
    import torch.nn.functional as F

    if len({t.length for t in trials}) != 1:
        raise ValueError("a batch must hold trials of one length")
    ids = torch.tensor([t.ids for t in trials], dtype=torch.long, device=device)
    head = logits_fn(model)
    out = []
    with torch.inference_mode():
        hidden = body_hidden_batch(model, ids)
        for row, trial in enumerate(trials):
            n, k = trial.length, trial.answer_len
            logits = head(hidden[row, n - 1 - k:n - 1]).float()
            target = ids[row, n - k:].to(logits.device)
            nll = float(F.cross_entropy(logits, target, reduction="sum"))
            out.append((tuple(int(x) for x in logits.argmax(-1)), nll))
    return out


def greedy(engine: Any, prompts: list[tuple[int, ...]], budgets: list[int], length: int,
           done: list[Callable[[list[int]], bool]] | None = None) -> list[tuple[int, ...]]:
    """Per prompt, its greedy continuation: at most its budget of tokens, ending at an end-of-sequence token as
    ``generate`` and vLLM do. transformers: a KV-cached loop here (``done(tokens)`` may end it early once the rest
    cannot change the score); another engine: its own ``generate(prompts, budgets, length)`` (``length``: the
    cell's, which picks the engine that serves it)."""
    from ropectl.eval.engines import DEFAULT_ENGINE

    if engine.name != DEFAULT_ENGINE:
        return [tuple(int(t) for t in out) for out in engine.generate(prompts, budgets, length)]
    eos = end_tokens(engine.model, engine.tokenizer)
    stops = done or [None] * len(prompts)
    return [continuation(engine.model, p, n, engine.input_device(), eos, stop)
            for p, n, stop in zip(prompts, budgets, stops, strict=True)]


def end_tokens(model: Any, tokenizer: Any) -> set[int]:
    """The ids greedy decoding stops at: the generation config's end-of-sequence ids and the tokenizer's."""
    config = getattr(model, "generation_config", None)
    ids = getattr(config, "eos_token_id", None)
    out = set(ids if isinstance(ids, (list, tuple)) else ([] if ids is None else [ids]))
    if getattr(tokenizer, "eos_token_id", None) is not None:
        out.add(int(tokenizer.eos_token_id))
    return out


def continuation(model: Any, prompt: tuple[int, ...], budget: int, device: Any, eos: set[int],
                 done: Callable[[list[int]], bool] | None = None) -> tuple[int, ...]:
    """Greedy decoding of one prompt with the KV cache, the head only at the last position. The rotary modules are
    restored afterwards: dynamic scaling grows its base past the cell's length, which the cell's check reads."""
    import torch

    from ropectl.eval.rotary import kept_rotary

    body = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    head = logits_fn(model)
    ids = torch.tensor([list(prompt)], dtype=torch.long, device=device)
    tokens: list[int] = []
    past = None
    with torch.inference_mode(), kept_rotary(model):
        for _ in range(budget):
            out = body(input_ids=ids, past_key_values=past, use_cache=True)
            past = out.past_key_values
            token = int(head(out.last_hidden_state[0, -1:]).float().argmax(-1)[0])
            tokens.append(token)
            if token in eos or (done is not None and done(tokens)):
                break
            ids = torch.tensor([[token]], dtype=torch.long, device=device)
    return tuple(tokens)
