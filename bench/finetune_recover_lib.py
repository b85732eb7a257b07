"""Steps to recover, read from `ropectl finetune --eval-every` logs: pure functions (no torch), tested on their own.

An eval row of OUT/train_log.jsonl is {step, tokens, eval: {LENGTH: {ppl, nll_sum, count, per_doc: [[nll_sum,
count], ...]}}}, the same held-out documents at every length and step. The figure of merit is PPL@target ÷
PPL@trained of the same model: fine-tuning on the evaluation's domain lowers PPL at every length, and the ratio cancels
that (the `none` run at the trained length shows how much it is). Its interval pairs the documents: the per-document
mean NLL at the target minus the one at the trained length, through ropectl/eval/stats.py paired_log_ratio with unit
weights. Every document is cut to the same number of tokens at one length (eval-ppl's truncate mode), so the
token-weighted PPL ratio and the mean of per-document log ratios are the same number.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ropectl.eval.stats import paired_log_ratio

WITHIN = 1.05  # "recovered": PPL@target within 5 % of PPL@trained (the criterion)


@dataclass(frozen=True)
class Point:
    """One evaluation of one run: PPL at both lengths and their paired ratio with its 95 % interval."""

    step: int
    tokens: int
    ppl_trained: float
    ppl_target: float
    ratio: float
    lo: float
    hi: float
    docs: int


def eval_rows(lines: Iterable[str]) -> list[dict[str, Any]]:
    """The rows of a train_log.jsonl that carry an evaluation, in step order (a blank or partial last line is
    skipped: a run killed mid-write still has its earlier rows)."""
    rows = []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and row.get("eval"):
            rows.append(row)
    return sorted(rows, key=lambda r: r["step"])


def read_log(path: Path) -> list[dict[str, Any]]:
    return eval_rows(path.read_text(encoding="utf-8").splitlines()) if path.is_file() else []


def _per_doc_means(cell: Mapping[str, Any]) -> list[float]:
    return [nll / count for nll, count in cell["per_doc"]]


def point(step: int, tokens: int, trained: Mapping[str, Any], target: Mapping[str, Any]) -> Point:
    """PPL@target ÷ PPL@trained over the same documents (paired by position in per_doc)."""
    a, b = _per_doc_means(target), _per_doc_means(trained)
    if len(a) != len(b):
        raise ValueError(f"step {step}: {len(a)} documents at the target, {len(b)} at the trained length")
    r = paired_log_ratio(a, b, [1] * len(a))
    return Point(step, tokens, _ppl(trained), _ppl(target), r.ratio, r.lo, r.hi, len(a))


def _ppl(cell: Mapping[str, Any]) -> float:
    return math.exp(sum(n for n, _ in cell["per_doc"]) / sum(c for _, c in cell["per_doc"]))


def curve(rows: Sequence[Mapping[str, Any]], trained: int, target: int) -> list[Point]:
    """One point per eval row that has both lengths."""
    out = []
    for row in rows:
        ev = {int(k): v for k, v in row["eval"].items()}
        if trained in ev and target in ev:
            out.append(point(int(row["step"]), int(row.get("tokens", 0)), ev[trained], ev[target]))
    return out


def steps_to_recover(points: Sequence[Point], within: float = WITHIN, strict: bool = False) -> Point | None:
    """The first point from which the ratio stays within ``within`` at every later evaluation (a single lucky
    dip does not count); ``strict``: its interval's upper end must be within too. None: not recovered."""
    first = None
    for p in points:
        ok = (p.hi if strict else p.ratio) <= within
        if ok and first is None:
            first = p
        elif not ok:
            first = None
    return first


def zero_shot_rows(cells: Sequence[Mapping[str, Any]], method: str, lengths: Sequence[int]) -> dict[str, Any]:
    """eval-ppl's per-document cells of one method as a step-0 eval row (documents in one order at both lengths)."""
    docs = sorted({c["doc"] for c in cells if c["method"] == method})
    table = {(c["length"], c["doc"]): (c["nll_sum"], c["tokens"]) for c in cells if c["method"] == method}
    ev = {str(n): {"per_doc": [list(table[(n, d)]) for d in docs]} for n in lengths}
    return {"step": 0, "tokens": 0, "eval": ev}


def curve_against(rows: Sequence[Mapping[str, Any]], control: Sequence[Mapping[str, Any]], trained: int,
                  target: int) -> list[Point]:
    """PPL@target of a run ÷ PPL@trained of the control run (`none` fine-tuned at the trained length, same seed and
    steps), paired over the same documents: the in-window cost a method keeps counts here, where the same-model ratio
    of ``curve`` would call a model that is equally bad at both lengths recovered."""
    base = {int(r["step"]): {int(k): v for k, v in r["eval"].items()}.get(trained) for r in control}
    out = []
    for row in rows:
        ev = {int(k): v for k, v in row["eval"].items()}
        ref = base.get(int(row["step"]))
        if target in ev and ref is not None:
            out.append(point(int(row["step"]), int(row.get("tokens", 0)), ref, ev[target]))
    return out
