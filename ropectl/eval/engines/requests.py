"""The three scoring calls every evaluation engine answers, as lm-eval's backends answer its three request types.

Requests and results belong to no engine: a task builds requests from token ids and reads results, and never asks
which engine ran them.

- ``SequenceNLL(tokens, cuts, score_from)`` -> ``SequenceScore``: the NLL of every token of ``tokens`` from
  ``score_from + 1`` on, each predicted from all the tokens before it (perplexity; a sliding window keeps only its
  tail), and its sums at the prefix lengths ``cuts`` (one forward of the longest length serves every shorter one).
- ``AnswerLogprobs(prompt, answer)`` -> ``AnswerScore``: teacher forcing; at each answer position the argmax token
  and the answer token's log-prob, predicted from the prompt and the answer tokens before it.
- ``GreedyContinuation(prompt, budget, stop, answer, context)`` -> ``Continuation``: greedy decoding of at most
  ``budget`` tokens, ending at an end-of-sequence token or once ``stop(tokens)`` holds; with ``answer``, also that
  answer's teacher-forced NLL after the prompt.

A call takes a list of one kind of request. Requests of one length in one call share a forward where the engine
batches (the caller sizes the call: eval-ppl's --batch-tokens).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SequenceNLL:
    tokens: Sequence[int]
    cuts: tuple[int, ...] = ()  # prefix lengths (tokens) whose NLL sum and count the score gives
    score_from: int = 0  # the first position whose prediction is kept (its target is tokens[score_from + 1])


@dataclass(frozen=True)
class SequenceScore:
    """``nll[k]`` is the NLL of ``tokens[score_from + 1 + k]``: a 1-D CPU tensor (fp32 where the engine computes in
    torch, fp64 from an engine's float log-probs). ``sums``/``counts``: per cut, over the kept targets before it."""

    nll: Any
    sums: tuple[float, ...]
    counts: tuple[int, ...]


def sequence_score(request: SequenceNLL, nll: Any) -> SequenceScore:
    """The score of ``request`` from its per-token NLL (float64 sums; every engine sums alike)."""
    sums, counts = [], []
    for cut in request.cuts:
        kept = nll[: max(0, cut - 1 - request.score_from)]
        sums.append(float(kept.double().sum()))
        counts.append(int(kept.shape[0]))
    return SequenceScore(nll, tuple(sums), tuple(counts))


@dataclass(frozen=True)
class AnswerLogprobs:
    prompt: Sequence[int]
    answer: Sequence[int]

    @property
    def tokens(self) -> list[int]:
        return [*self.prompt, *self.answer]


@dataclass(frozen=True)
class AnswerScore:
    """Per answer token: the argmax token and the answer token's log-prob; ``nll``: the answer's NLL in nats, summed
    as the engine sums it (transformers: one fp32 cross-entropy sum)."""

    argmax: tuple[int, ...]
    logprobs: tuple[float, ...]
    nll: float


@dataclass(frozen=True)
class GreedyContinuation:
    prompt: Sequence[int]
    budget: int  # at most this many new tokens
    stop: Callable[[list[int]], bool] | None = None  # called with the tokens so far after each one
    answer: Sequence[int] = ()  # the reference continuation whose teacher-forced NLL comes along
    context: int | None = None  # the cell's length: an engine serving a fixed context serves this one


@dataclass(frozen=True)
class Continuation:
    tokens: tuple[int, ...]
    answer_nll: float  # 0.0 without an answer
