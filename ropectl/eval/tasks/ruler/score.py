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
    """Trials of one length in one forward; an engine with its own ``teacher_forced`` (vLLM) scores there."""
    if hasattr(engine, "teacher_forced"):
        got = engine.teacher_forced([list(t.ids) for t in trials], [t.prompt_len for t in trials])
    else:
        got = teacher_forced(engine.model, trials, engine.input_device())
    return [judge(t, tuple(p), nll) for t, (p, nll) in zip(trials, got, strict=True)]


def teacher_forced(model: Any, trials: list[Trial], device: Any) -> list[tuple[tuple[int, ...], float]]:
    """transformers: the decoder body over the whole batch, the head over each trial's answer positions only."""
    import torch
    import torch.nn.functional as F

    from ropectl.eval.forward import body_hidden_batch, logits_fn

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
