"""Loss by position: per-token NLL summed into buckets of target positions, token-weighted across documents.

A target at position t (0-based index in the forward; it is predicted from t tokens of context) falls in
bucket t // B. Truncate mode buckets document positions; sliding mode buckets the position inside the
window, i.e. how much context the prediction had. The buckets of a cell sum to the cell's NLL exactly
(same per-token values, float64 sums), so they cost no extra forward.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

DEFAULT_BUCKET = 512


def bucket_sums(nll: Any, first_target: int, bucket: int) -> tuple[list[float], list[int]]:
    """NLL sums and token counts per bucket for targets ``first_target, first_target+1, ...``."""
    import torch

    n = int(nll.shape[0])
    if n == 0:
        return [], []
    positions = torch.arange(first_target, first_target + n)
    index = torch.div(positions, bucket, rounding_mode="floor")
    size = int(index[-1]) + 1
    sums = torch.zeros(size, dtype=torch.float64).index_add_(0, index, nll.double())
    counts = torch.bincount(index, minlength=size)
    return [float(x) for x in sums], [int(x) for x in counts]


def merge(into: tuple[list[float], list[int]], add: tuple[list[float], list[int]]) -> tuple[list[float], list[int]]:
    sums, counts = list(into[0]), list(into[1])
    for i, (s, c) in enumerate(zip(*add, strict=True)):
        if i >= len(sums):
            sums.append(0.0)
            counts.append(0)
        sums[i] += s
        counts[i] += c
    return sums, counts


@dataclass(frozen=True)
class PositionCurve:
    """Mean NLL per position bucket of one (method, length), pooled over its documents."""

    method: str
    length: int
    bucket: int
    docs: int
    nll: tuple[float, ...]  # sum NLL / sum tokens per bucket
    tokens: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "length": self.length, "bucket": self.bucket, "docs": self.docs,
                "mean_nll": list(self.nll), "tokens": list(self.tokens)}


def curves(cells: Iterable[Any], bucket: int) -> list[PositionCurve]:
    """One curve per (method, length), from cells that carry buckets of size ``bucket``."""
    groups: dict[tuple[str, int], list[Any]] = {}
    for cell in cells:
        if getattr(cell, "bucket", None) == bucket and cell.bucket_nll:
            groups.setdefault((cell.method, cell.length), []).append(cell)
    out = []
    for (method, length), members in groups.items():
        acc: tuple[list[float], list[int]] = ([], [])
        for cell in members:
            acc = merge(acc, (list(cell.bucket_nll), list(cell.bucket_tokens)))
        means = tuple(s / c if c else float("nan") for s, c in zip(*acc, strict=True))
        out.append(PositionCurve(method, length, bucket, len(members), means, tuple(acc[1])))
    return out


def longest_per_method(found: list[PositionCurve], methods: list[str]) -> list[PositionCurve]:
    """The curve to draw per method: its longest length (it covers every position the sweep reached)."""
    out = []
    for method in methods:
        mine = [c for c in found if c.method == method]
        if mine:
            out.append(max(mine, key=lambda c: c.length))
    return out
