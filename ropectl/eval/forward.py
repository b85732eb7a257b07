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


def decoder(model: Any) -> Any:
    """The decoder body (no lm_head) of a causal LM or a vision-language model's language model."""
    return model.get_decoder() if hasattr(model, "get_decoder") else model.model


def body_hidden_batch(model: Any, input_ids: Any) -> Any:
    """The last hidden state [B, T, H] of equal-length sequences (no padding, no mask), no lm_head."""
    body = decoder(model)
    output = body(input_ids=input_ids, use_cache=False)
    return output.last_hidden_state


def answers(engine: Any, trials: list[Any]) -> list[tuple[tuple[int, ...], float]]:
    """Per trial (``ids`` of ``length`` tokens ending in ``answer_len`` answer tokens): the argmax at each answer
    position and the answer's NLL. transformers: one batched forward here; another engine (vLLM): its own
    ``teacher_forced(prompts, answer_starts)``, from prompt log-probs."""
    from ropectl.eval.engines import DEFAULT_ENGINE

    if engine.name != DEFAULT_ENGINE:
        return [(tuple(p), float(nll)) for p, nll in
                engine.teacher_forced([list(t.ids) for t in trials], [len(t.ids) - t.answer_len for t in trials])]
    return teacher_forced(engine.model, trials, engine.input_device())


def teacher_forced(model: Any, trials: list[Any], device: Any) -> list[tuple[tuple[int, ...], float]]:
    """Trials of one length share a forward (equal lengths: no padding, each row is its batch-1 self); the head runs
    only over the positions that predict each trial's answer, so no [length, vocab] logits."""
    import torch
    import torch.nn.functional as F

    if len({len(t.ids) for t in trials}) != 1:
        raise ValueError("a batch must hold trials of one length")
    ids = torch.tensor([t.ids for t in trials], dtype=torch.long, device=device)
    head = logits_fn(model)
    out = []
    with torch.inference_mode():
        hidden = body_hidden_batch(model, ids)
        for row, trial in enumerate(trials):
            n, k = len(trial.ids), trial.answer_len
            logits = head(hidden[row, n - 1 - k:n - 1]).float()
            target = ids[row, n - k:].to(logits.device)
            nll = float(F.cross_entropy(logits, target, reduction="sum"))
            out.append((tuple(int(x) for x in logits.argmax(-1)), nll))
    return out


def greedy_answers(engine: Any, trials: list[Any], budgets: list[int], done: list[Callable[[list[int]], bool]],
                   on_prefill: Callable[[int], None] | None = None) -> list[tuple[tuple[int, ...], float]]:
    """Per trial (``ids`` ending in ``answer_len`` answer tokens): greedy decoding's output from the prompt (at most
    its budget, ending at an end-of-sequence token as ``generate`` and vLLM do, or once ``done(tokens)``: the rest
    cannot change the score) and the answer's teacher-forced NLL.

    transformers: one KV-cached decode per trial here (``on_prefill(n)`` after each prompt's forward of n tokens:
    the check of length-dependent RoPE). Another engine (vLLM): teacher forcing from its prompt
    log-probs first; where every answer position's argmax is the answer token, greedy decoding reproduces the
    answer and no generation runs; the others go to the engine's ``generate(prompts, budgets, length)``."""
    from ropectl.eval.engines import DEFAULT_ENGINE

    if engine.name == DEFAULT_ENGINE:
        eos = end_tokens(engine.model, engine.tokenizer)
        return [continuation(engine.model, t.ids[:t.prompt_len], n, engine.input_device(), eos, stop,
                             t.ids[t.prompt_len:], on_prefill) for t, n, stop in zip(trials, budgets, done, strict=True)]
    out = answers(engine, trials)
    open_ = [i for i, (t, (p, _)) in enumerate(zip(trials, out)) if tuple(p) != tuple(t.ids[t.prompt_len:])]
    if open_:
        generated = engine.generate([trials[i].ids[:trials[i].prompt_len] for i in open_], [budgets[i] for i in open_],
                                    trials[0].length)
        for i, tokens in zip(open_, generated, strict=True):
            out[i] = (tuple(int(x) for x in tokens), out[i][1])
    return out


def end_tokens(model: Any, tokenizer: Any) -> set[int]:
    """The ids greedy decoding stops at: the generation config's end-of-sequence ids and the tokenizer's."""
    config = getattr(model, "generation_config", None)
    ids = getattr(config, "eos_token_id", None)
    out = set(ids if isinstance(ids, (list, tuple)) else ([] if ids is None else [ids]))
    if getattr(tokenizer, "eos_token_id", None) is not None:
        out.add(int(tokenizer.eos_token_id))
    return out


def continuation(model: Any, prompt: tuple[int, ...], budget: int, device: Any, eos: set[int],
                 done: Callable[[list[int]], bool] | None = None, answer: tuple[int, ...] = (),
                 on_prefill: Callable[[int], None] | None = None) -> tuple[tuple[int, ...], float]:
    """Greedy decoding of one prompt with the KV cache, the head only at the last position, and the teacher-forced
    NLL of ``answer`` along the way (its tail, once greedy leaves it, from a copy of the cache). The rotary modules
    are restored afterwards: dynamic scaling grows its base as decoding goes on, and the next prompt must start
    from the state the method was put in."""
    import copy

    import torch

    from ropectl.eval.rotary import kept_rotary

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
