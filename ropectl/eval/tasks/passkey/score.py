"""Teacher-forced passkey scoring: one forward per batch of trials, lm_head only at the answer positions.

Greedy decoding emits argmax(logits) at each step; with the answer appended, a trial succeeds exactly when
the argmax at every answer position equals the answer token, i.e. when greedy decoding would have
produced the key. No generation loop, no KV cache, and no [length, vocab] logits: the decoder body runs
over the whole prompt, the head only over the ``answer_len`` positions that predict the answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ropectl.eval.tasks.passkey.prompt import Trial


@dataclass(frozen=True)
class Outcome:
    success: bool
    predicted: tuple[int, ...]  # argmax token at each answer position
    answer_nll: float  # sum over the answer tokens, nats


def score_trials(model: Any, trials: list[Trial], device: Any) -> list[Outcome]:
    """transformers: trials of one length in one forward."""
    from ropectl.eval.forward import teacher_forced

    return outcomes(trials, teacher_forced(model, trials, device))


def score_with(engine: Any, trials: list[Trial]) -> list[Outcome]:
    """On the sweep's engine (transformers, or vLLM's prompt log-probs)."""
    from ropectl.eval.forward import answers

    return outcomes(trials, answers(engine, trials))


def outcomes(trials: list[Trial], got: list[tuple[tuple[int, ...], float]]) -> list[Outcome]:
    """A trial succeeds when the argmax at every answer position is the answer token (greedy gives the key)."""
    return [Outcome(predicted == tuple(t.ids[t.length - t.answer_len:]), predicted, nll)
            for t, (predicted, nll) in zip(trials, got, strict=True)]
