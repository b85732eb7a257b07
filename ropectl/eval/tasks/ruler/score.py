"""Scoring RULER-style trials as RULER does: greedy generation from the prompt (RULER's answer prefix ends it),
scored with ``string_match_all`` on the decoded output, which credits a reference anywhere in it (":7024420",
another order of several).

A trial ends ``SLACK`` tokens before its cell's length, so greedy decoding gets the canonical answer's length plus
``SLACK`` (at most the task's RULER budget): ": 8284194" fits, and nothing runs past the cell's length, where
vLLM's RoPE table for the served length ends. RULER generates up to its whole budget (128 tokens for NIAH), so an
answer that needs still more tokens (a sentence around the number) is found by RULER and not here: within that
budget, the score is RULER's.

transformers decodes each trial with the KV cache and stops as soon as every reference is in the output (more
tokens cannot lose one) or at end of sequence; the same pass gives the answer's teacher-forced NLL. vLLM first
teacher-forces the canonical answer from its prompt log-probs: where every argmax is the answer token, greedy
decoding reproduces the answer, so every reference is found and nothing is generated (``forward.greedy_answers``).
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


def score_trials(engine: Any, trials: list[Trial], on_prefill: Callable[[int], None] | None = None) -> list[Outcome]:
    """Trials of one length, each scored on its greedy output (``on_prefill``: see ``forward.greedy_answers``)."""
    from ropectl.eval.forward import greedy_answers
    from ropectl.eval.tasks.ruler import GENERATORS

    decode = engine.tokenizer.decode

    def all_found(trial: Trial) -> Callable[[list[int]], bool]:
        return lambda tokens: string_match_all(decode(tokens), trial.references) == len(trial.references)

    budgets = [min(GENERATORS[t.task].budget, t.answer_len + SLACK) for t in trials]
    got = greedy_answers(engine, trials, budgets, [all_found(t) for t in trials], on_prefill)
    out = []
    for trial, (tokens, nll) in zip(trials, got, strict=True):
        found = string_match_all(decode(list(tokens)), trial.references)
        out.append(Outcome(found / len(trial.references), found, tuple(tokens), nll))
    return out
