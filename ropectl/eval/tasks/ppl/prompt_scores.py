"""Cells from an engine's prompt log-probs (``engine.token_logprobs``), for engines that are not a torch module
(vLLM): the same cells as ``plan.run_batch`` computes from transformers' hidden states, token-weighted NLL per
document and length, truncate and sliding modes, split by position alike."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ropectl.eval.tasks.ppl.plan import Job, Score, truncate_score, windows

TokenLogprobs = Callable[[Sequence[Sequence[int]]], list[list[float]]]


def run_batch_logprobs(jobs: list[Job], token_logprobs: TokenLogprobs, mode: str, stride: int, bucket: int,
                       on_tokens: Callable[[int], None]) -> list[dict[tuple[str, int], Score]]:
    """Per job, {(method label, length): Score}; one call of ``token_logprobs`` per batch (or document's windows)."""
    if mode != "truncate":
        return [_sliding(job, token_logprobs, stride, bucket, on_tokens) for job in jobs]
    length = jobs[0].length
    rows = token_logprobs([list(j.doc.tokens[:length]) for j in jobs])
    out = [{(label, n): truncate_score(_nll(row), n, bucket) for label, n in job.cells}
           for row, job in zip(rows, jobs, strict=True)]
    on_tokens(length * len(jobs))
    return out


def _nll(logprobs: Sequence[float]) -> Any:
    import torch

    return -torch.tensor(logprobs, dtype=torch.float64)


def _sliding(job: Job, token_logprobs: TokenLogprobs, stride: int, bucket: int,
             on_tokens: Callable[[int], None]) -> dict[tuple[str, int], Score]:
    from ropectl.eval.tasks.ppl.positions import bucket_sums, merge

    spans = windows(job.doc.n_tokens, job.length, stride)
    rows = token_logprobs([list(job.doc.tokens[start:start + job.length]) for start, _ in spans])
    total, acc = 0.0, ([], [])
    for (start, first_target), row in zip(spans, rows, strict=True):
        nll = _nll(row[first_target - 1 - start:])  # row[k] scores window token k + 1
        total += float(nll.sum())
        acc = merge(acc, bucket_sums(nll, first_target - start, bucket))
    on_tokens(len(spans) * job.length)
    score = Score(job.doc.n_tokens - 1, total, tuple(acc[0]), tuple(acc[1]))
    return {cell: score for cell in job.cells}
