"""Which forwards a sweep needs, and turning their per-token NLL into (method, length, document) cells.

Truncate mode shares forwards: a causal model's predictions for the first L tokens do not depend on
what follows, so one forward of the longest length serves every shorter length whose rotary embedding
is identical (its ``signature``). Static methods need one forward per document; a length-dependent one
(dynamic, longrope) needs one per distinct signature, and dynamic below the trained context equals the
unscaled model, so it reuses that forward. Sliding mode shares only identical signatures at equal lengths.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ropectl.eval.engines import Engine
from ropectl.eval.engines.requests import SequenceNLL, SequenceScore
from ropectl.runtime.corpus import Document
from ropectl.runtime.model import MethodState


@dataclass(frozen=True)
class Job:
    """One forward pass (truncate) or one sliding sweep over a document, filling one or more cells."""

    state: MethodState  # whose rotary embedding runs the forward
    doc: Document
    length: int  # forward (window) length
    cells: tuple[tuple[str, int], ...]  # (method label, length) cells it fills for this document

    @property
    def label(self) -> str:
        return f"{self.state.label} @ {self.length} · {self.doc.doc_id}"


def windows(n_tokens: int, length: int, stride: int) -> list[tuple[int, int]]:
    """(start, first scored target) of each full-length window; every target 1..n-1 is scored exactly once.

    ``stride`` must be below ``length``: a window's first token has no context inside that window.
    """
    if not 1 <= stride < length <= n_tokens:
        raise ValueError(f"need 1 <= stride < length <= n_tokens, got {stride}, {length}, {n_tokens}")
    starts = list(range(0, n_tokens - length + 1, stride))
    if starts[-1] != n_tokens - length:
        starts.append(n_tokens - length)  # a last full window keeps every forward the same length
    out, scored_to = [], 1
    for start in starts:
        out.append((start, scored_to))
        scored_to = start + length
    return out


def job_tokens(job: Job, mode: str, stride: int) -> int:
    if mode == "truncate":
        return job.length
    return len(windows(job.doc.n_tokens, job.length, stride)) * job.length


def plan_jobs(states: list[MethodState], lengths: list[int], docs: list[Document], mode: str,
              done: set[tuple[str, int, str]]) -> list[Job]:
    """Jobs for the cells not yet ``done``, ordered by method so the rotary module is rebuilt rarely."""
    jobs: list[Job] = []
    for doc in docs:
        groups: dict[Any, list[tuple[MethodState, int]]] = {}
        for state in states:
            for length in lengths:
                if length <= doc.n_tokens and (state.label, length, doc.doc_id) not in done:
                    key = state.signature(length) if mode == "truncate" else (state.signature(length), length)
                    groups.setdefault(key, []).append((state, length))
        for members in groups.values():
            runner, longest = max(members, key=lambda m: m[1])
            jobs.append(Job(runner, doc, longest, tuple((s.label, n) for s, n in members)))
    order = {s.label: i for i, s in enumerate(states)}
    doc_order = {d.doc_id: i for i, d in enumerate(docs)}
    return sorted(jobs, key=lambda j: (order[j.state.label], doc_order[j.doc.doc_id], j.length))


@dataclass(frozen=True)
class Score:
    """One cell's numbers for one document: tokens scored, their NLL sum, and the same split by position."""

    tokens: int
    nll_sum: float
    bucket_nll: tuple[float, ...] = ()
    bucket_tokens: tuple[int, ...] = ()


def batch_jobs(jobs: list[Job], mode: str, batch_tokens: int) -> list[list[Job]]:
    """Truncate jobs of one method and length share a forward, ``batch_tokens // length`` documents at a time.

    Every document is cut to the same length, so a batch needs no padding and each row's numbers are the
    batch-1 numbers. Sliding jobs and long lengths stay batch 1.
    """
    if mode != "truncate":
        return [[j] for j in jobs]
    groups: dict[tuple[str, int], list[Job]] = {}
    for job in jobs:
        groups.setdefault((job.state.label, job.length), []).append(job)
    out: list[list[Job]] = []
    for (_, length), members in groups.items():
        size = max(1, batch_tokens // length)
        out += [members[i:i + size] for i in range(0, len(members), size)]
    return out


def run_batch(jobs: list[Job], engine: Engine, mode: str, stride: int, bucket: int,
              on_tokens: Callable[[int], None]) -> list[dict[tuple[str, int], Score]]:
    """Score the jobs on ``engine`` (a truncate batch in one call, its cells the cut points of each document's
    forward; sliding mode one call per window); per job, {(method label, length): Score}."""
    if mode != "truncate":
        return [_run_sliding(job, engine, stride, bucket, on_tokens) for job in jobs]
    length = jobs[0].length
    got = engine.sequence_nll([SequenceNLL(j.doc.tokens[:length], tuple(n for _, n in j.cells)) for j in jobs])
    out = [{(label, n): truncate_score(score, k, bucket) for k, (label, n) in enumerate(job.cells)}
           for job, score in zip(jobs, got, strict=True)]
    on_tokens(length * len(jobs))
    return out


def truncate_score(score: SequenceScore, cut: int, bucket: int) -> Score:
    """The cell of the ``cut``-th cut point: its tokens and NLL sum, and the same split by position."""
    from ropectl.eval.tasks.ppl.positions import bucket_sums

    head = score.nll[: score.counts[cut]].double()
    sums, counts = bucket_sums(head, 1, bucket)
    return Score(score.counts[cut], score.sums[cut], tuple(sums), tuple(counts))


def _run_sliding(job: Job, engine: Engine, stride: int, bucket: int,
                 on_tokens: Callable[[int], None]) -> dict[tuple[str, int], Score]:
    from ropectl.eval.tasks.ppl.positions import bucket_sums, merge

    total, acc = 0.0, ([], [])
    for start, first_target in windows(job.doc.n_tokens, job.length, stride):
        request = SequenceNLL(job.doc.tokens[start:start + job.length], score_from=first_target - 1 - start)
        nll = engine.sequence_nll([request])[0].nll.double()
        total += float(nll.sum())
        acc = merge(acc, bucket_sums(nll, first_target - start, bucket))  # position inside the window
        on_tokens(job.length)
    score = Score(job.doc.n_tokens - 1, total, tuple(acc[0]), tuple(acc[1]))
    return {cell: score for cell in job.cells}


def by_serving(batches: list[list[Job]], states: list[MethodState]) -> list[list[Job]]:
    """Batches ordered by method, then length (stable): an engine whose method switch is not cheap (vLLM reloads
    its weights for each RoPE it serves) then starts each once, where sliding mode's per-document order would start
    one again for each document."""
    order = {s.label: i for i, s in enumerate(states)}
    return sorted(batches, key=lambda b: (order[b[0].state.label], b[0].length))
