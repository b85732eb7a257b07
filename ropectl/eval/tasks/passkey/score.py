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


def score_with(engine: Any, trials: list[Trial]) -> list[Outcome]:
    """Trials of one length, teacher forced on the sweep's engine."""
    from ropectl.eval.engines.requests import AnswerLogprobs

    got = engine.answer_logprobs([AnswerLogprobs(t.ids[:len(t.ids) - t.answer_len], t.ids[len(t.ids) - t.answer_len:])
                                  for t in trials])
    return outcomes(trials, [(g.argmax, g.nll) for g in got])


def outcomes(trials: list[Trial], got: list[tuple[tuple[int, ...], float]]) -> list[Outcome]:
    """A trial succeeds when the argmax at every answer position is the answer token (greedy gives the key)."""
    return [Outcome(predicted == tuple(t.ids[t.length - t.answer_len:]), predicted, nll)
            for t, (predicted, nll) in zip(trials, got, strict=True)]
