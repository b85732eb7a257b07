"""Teacher-forced scoring of RULER-style trials: one forward per batch, the head only at the answer positions.

With RULER's answer prefix in the prompt and the canonical answer appended, greedy decoding reproduces the
answer's first k tokens exactly when the argmax at each of them is the answer token. A reference counts as found
when greedy decoding would have produced the answer up to and including it ("greedy prefix"): for one reference
this is RULER's ``string_match_all`` on greedy output of the answer's length; for several (multi-value, common
words) it is the references greedy decoding gives in the canonical order, a lower bound on string_match_all,
which also credits another order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ropectl.eval.tasks.ruler.build import Trial


@dataclass(frozen=True)
class Outcome:
    score: float  # fraction of the references found
    found: int
    predicted: tuple[int, ...]  # argmax token at each answer position
    answer_nll: float  # sum over the answer tokens, nats


def judge(trial: Trial, predicted: tuple[int, ...], answer_nll: float) -> Outcome:
    """References found by the greedy-prefix rule, from the argmax at each answer position."""
    answer = trial.ids[trial.prompt_len:]
    first_wrong = next((i for i, (p, a) in enumerate(zip(predicted, answer)) if p != a), len(answer))
    found = sum(1 for _, end in trial.spans if end <= first_wrong)
    return Outcome(found / len(trial.spans), found, tuple(predicted), answer_nll)


def score_trials(engine: Any, trials: list[Trial]) -> list[Outcome]:
    """Trials of one length in one forward (transformers) or from the engine's prompt log-probs (vLLM)."""
    from ropectl.eval.forward import answers

    return [judge(t, p, nll) for t, (p, nll) in zip(trials, answers(engine, trials), strict=True)]
