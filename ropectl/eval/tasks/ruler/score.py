"""Scoring RULER-style trials as RULER does: greedy generation from the prompt (RULER's answer prefix ends it),
scored with ``string_match_all`` on the decoded output, which credits a reference anywhere in it (":7024420",
another order of several).

A trial ends ``SLACK`` tokens before its cell's length, so greedy decoding gets the canonical answer's length plus
``SLACK`` (at most the task's RULER budget): ": 8284194" fits, and nothing runs past the cell's length, where
vLLM's RoPE table for the served length ends. RULER generates up to its whole budget (128 tokens for NIAH), so an
answer that needs still more tokens (a sentence around the number) is found by RULER and not here: within that
budget, the score is RULER's.

Each trial is one ``GreedyContinuation`` request on the sweep's engine: decoding stops as soon as every reference is
in the output (more tokens cannot lose one) or at end of sequence, and the canonical answer's teacher-forced NLL
comes with it. The engine checks the RoPE each prompt's forward used (a prompt is shorter than its cell).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ropectl.eval.tasks.ruler.build import SLACK, Trial


@dataclass(frozen=True)
class Outcome:
    score: float  # fraction of the references found
    found: int
    predicted: tuple[int, ...]  # the greedy output (up to where it stopped)
    answer_nll: float  # the canonical answer's NLL, teacher forced, nats


def string_match_all(text: str, references: tuple[str, ...]) -> int:
    """RULER's metric, as a count: the references found in the output, case-insensitive."""
    low = text.lower()
    return sum(1 for ref in references if ref.lower() in low)


def score_trials(engine: Any, trials: list[Trial]) -> list[Outcome]:
    """Trials of one length, each scored on its greedy output."""
    from ropectl.eval.engines.requests import GreedyContinuation
    from ropectl.eval.tasks.ruler import GENERATORS

    decode = engine.tokenizer.decode

    def all_found(trial: Trial) -> Callable[[list[int]], bool]:
        return lambda tokens: string_match_all(decode(tokens), trial.references) == len(trial.references)

    budgets = [min(GENERATORS[t.task].budget, t.answer_len + SLACK) for t in trials]
    got = engine.greedy([GreedyContinuation(t.ids[:t.prompt_len], n, all_found(t), t.ids[t.prompt_len:], t.length)
                         for t, n in zip(trials, budgets, strict=True)])
    out = []
    for trial, one in zip(trials, got, strict=True):
        found = string_match_all(decode(list(one.tokens)), trial.references)
        out.append(Outcome(found / len(trial.references), found, tuple(one.tokens), one.answer_nll))
    return out
