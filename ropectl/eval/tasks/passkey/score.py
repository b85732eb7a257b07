"""Teacher-forced passkey scoring: one forward per batch of trials, lm_head only at the answer positions.

Greedy decoding emits argmax(logits) at each step; with the answer appended, a trial succeeds exactly when
the argmax at every answer position equals the answer token, i.e. when greedy decoding would have
produced the key. No generation loop, no KV cache, and no [length, vocab] logits: the decoder body runs
over the whole prompt, the head only over the ``answer_len`` positions that predict the answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ropectl.eval.tasks.passkey.prompt import Trial


@dataclass(frozen=True)
class Outcome:
    success: bool
    predicted: tuple[int, ...]  # argmax token at each answer position
    answer_nll: float  # sum over the answer tokens, nats


def score_trials(model: Any, trials: list[Trial], device: Any) -> list[Outcome]:
    """Trials of one length share a forward (equal lengths: no padding, each row is its batch-1 self)."""
    import torch
    import torch.nn.functional as F

    from ropectl.eval.forward import body_hidden_batch, logits_fn

    if len({t.length for t in trials}) != 1:
        raise ValueError("a passkey batch must hold trials of one length")
    ids = torch.tensor([t.ids for t in trials], dtype=torch.long, device=device)
    head = logits_fn(model)
    out = []
    with torch.inference_mode():
        hidden = body_hidden_batch(model, ids)
        for row, trial in enumerate(trials):
            n, k = trial.length, trial.answer_len
            logits = head(hidden[row, n - 1 - k:n - 1]).float()  # the k positions that predict the answer
            target = ids[row, n - k:].to(logits.device)
            predicted = logits.argmax(-1)
            nll = float(F.cross_entropy(logits, target, reduction="sum"))
            out.append(Outcome(bool((predicted == target).all()), tuple(int(x) for x in predicted), nll))
    return out


def score_trials_forced(teacher_forced: Callable[..., Any], trials: list[Trial]) -> list[Outcome]:
    """The same outcomes from an engine's ``teacher_forced`` (vLLM's prompt log-probs): the argmax at each of the
    ``answer_len`` positions that predict the answer, and the answer's NLL."""
    forced = teacher_forced([list(t.ids) for t in trials], [t.length - t.answer_len for t in trials])
    out = []
    for trial, (predicted, nll) in zip(trials, forced, strict=True):
        answer = tuple(trial.ids[trial.length - trial.answer_len:])
        out.append(Outcome(tuple(predicted) == answer, tuple(predicted), float(nll)))
    return out
