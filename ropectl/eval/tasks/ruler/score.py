"""Scoring RULER-style trials as RULER does (greedy generation, ``string_match_all``), fast where it can be.

First teacher forcing: with RULER's answer prefix in the prompt and the canonical answer appended, one forward per
batch and the head only at the answer positions give the argmax at each answer token. Where every argmax is the
answer token, greedy decoding would produce the answer itself, so every reference is found: RULER's score is 1 and
nothing more runs. Any other trial is generated greedily from its prompt (at most the task's RULER budget of
tokens, ending at end of sequence) and scored with ``string_match_all`` on the decoded text, which credits a
reference anywhere in the output (":7024420", another order of several). So every score is RULER's on greedy
output; teacher forcing only skips the generations whose outcome it already knows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ropectl.eval.tasks.ruler.build import Trial

FORCED, GREEDY = "teacher forcing", "greedy"


@dataclass(frozen=True)
class Outcome:
    score: float  # fraction of the references found
    found: int
    predicted: tuple[int, ...]  # argmax at each answer position, or the greedy output
    answer_nll: float  # sum over the answer tokens, nats (teacher forced)
    scored_by: str = FORCED


def judge(trial: Trial, predicted: tuple[int, ...], answer_nll: float) -> Outcome:
    """References found by the greedy-prefix rule, from the argmax at each answer position: those whose tokens
    greedy decoding reproduces (all of them when every argmax is the answer token)."""
    answer = trial.ids[trial.prompt_len:]
    first_wrong = next((i for i, (p, a) in enumerate(zip(predicted, answer)) if p != a), len(answer))
    found = sum(1 for _, end in trial.spans if end <= first_wrong)
    return Outcome(found / len(trial.spans), found, tuple(predicted), answer_nll)


def string_match_all(text: str, references: tuple[str, ...]) -> int:
    """RULER's metric, as a count: the references found in the output, case-insensitive."""
    low = text.lower()
    return sum(1 for ref in references if ref.lower() in low)


def score_trials(engine: Any, trials: list[Trial]) -> list[Outcome]:
    """Trials of one length: teacher forcing in one forward (transformers) or from the engine's prompt log-probs
    (vLLM), then greedy generation for the trials it does not settle."""
    from ropectl.eval.forward import answers, greedy
    from ropectl.eval.tasks.ruler import GENERATORS

    outcomes = [judge(t, p, nll) for t, (p, nll) in zip(trials, answers(engine, trials), strict=True)]
    open_ = [i for i, o in enumerate(outcomes) if o.found < len(trials[i].spans)]
    if not open_:
        return outcomes
    decode = engine.tokenizer.decode
    todo = [trials[i] for i in open_]

    def all_found(trial: Trial) -> Any:  # once every reference is in the output, more tokens cannot lose one
        return lambda tokens: string_match_all(decode(tokens), trial.references) == len(trial.references)

    generated = greedy(engine, [t.ids[:t.prompt_len] for t in todo], [GENERATORS[t.task].budget for t in todo],
                       todo[0].length, [all_found(t) for t in todo])
    for i, trial, tokens in zip(open_, todo, generated, strict=True):
        found = string_match_all(decode(list(tokens)), trial.references)
        outcomes[i] = Outcome(found / len(trial.references), found, tokens, outcomes[i].answer_nll, GREEDY)
    return outcomes
