"""Long-form results (one row per method x length x document), the append-only log, and aggregation.

Aggregation is token-weighted: PPL = exp(sum NLL / sum tokens) over the documents measured at a length,
not a mean of per-document or per-window perplexities. The standard error is across documents: the
delta-method (linearised) standard error of that ratio estimator, propagated to PPL as PPL x s.e.(mean NLL).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ropectl.fsutil import atomic_write_text

LOG = "results.jsonl"
JSON = "results.json"
CSV = "results.csv"
SUMMARY = "summary.json"
PLOT = "ppl.png"
COLUMNS = ("model", "method", "params", "length", "doc", "tokens", "nll_sum", "ppl", "mode", "stride", "bucket",
           "bucket_nll", "bucket_tokens")
LIST_COLUMNS = ("params", "bucket_nll", "bucket_tokens")  # JSON-encoded in the CSV


@dataclass(frozen=True)
class Cell:
    """One finished (method, length, document) measurement."""

    model: str
    method: str
    length: int
    doc: str
    tokens: int
    nll_sum: float
    mode: str = "truncate"
    stride: int | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    bucket: int | None = None  # loss by position: NLL sum and tokens per bucket of target positions
    bucket_nll: tuple[float, ...] = ()
    bucket_tokens: tuple[int, ...] = ()

    @property
    def ppl(self) -> float:
        return math.exp(self.nll_sum / self.tokens)

    @property
    def key(self) -> tuple[str, int, str]:
        return (self.method, self.length, self.doc)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["params"] = dict(self.params)
        out["bucket_nll"], out["bucket_tokens"] = list(self.bucket_nll), list(self.bucket_tokens)
        out["ppl"] = self.ppl
        return {k: out[k] for k in COLUMNS}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Cell:
        return cls(str(d["model"]), str(d["method"]), int(d["length"]), str(d["doc"]), int(d["tokens"]),
                   float(d["nll_sum"]), str(d.get("mode", "truncate")), d.get("stride"), dict(d.get("params") or {}),
                   d.get("bucket"), tuple(float(x) for x in d.get("bucket_nll") or ()),
                   tuple(int(x) for x in d.get("bucket_tokens") or ()))


def append_cells(out: Path, cells: Iterable[Cell]) -> None:
    """Append finished cells to results.jsonl: one write per line (O_APPEND), flushed at once."""
    out.mkdir(parents=True, exist_ok=True)  # other ranks may run where rank 0 made the folder
    fd = os.open(out / LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        for cell in cells:
            os.write(fd, (json.dumps(cell.to_dict()) + "\n").encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)


def read_cells(out: Path) -> list[Cell]:
    """Everything finished so far: results.json (a completed run) and the log; a torn last line is ignored."""
    cells: dict[tuple[str, int, str], Cell] = {}
    final = out / JSON
    if final.is_file():
        try:
            for row in json.loads(final.read_text(encoding="utf-8")).get("results", []):
                cell = Cell.from_dict(row)
                cells[cell.key] = cell
        except (ValueError, KeyError, TypeError):
            pass
    log = out / LOG
    if log.is_file():
        for line in log.read_text(encoding="utf-8").splitlines():
            try:
                cell = Cell.from_dict(json.loads(line))
            except (ValueError, KeyError, TypeError):
                continue  # an interrupted write leaves at most one partial line
            cells[cell.key] = cell
    return list(cells.values())


@dataclass(frozen=True)
class Aggregate:
    method: str
    length: int
    docs: int
    tokens: int
    nll_sum: float
    ppl: float
    ppl_se: float | None
    nll_se: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def aggregate_cells(cells: list[Cell]) -> Aggregate:
    tokens = sum(c.tokens for c in cells)
    nll = sum(c.nll_sum for c in cells)
    mean = nll / tokens
    k = len(cells)
    se = None
    if k > 1:
        # Ratio estimator sum(y)/sum(n): residuals y_i - mean*n_i, scaled by the mean document size.
        n_bar = tokens / k
        resid = sum(((c.nll_sum - mean * c.tokens) / n_bar) ** 2 for c in cells)
        se = math.sqrt(resid / (k * (k - 1)))
    ppl = math.exp(mean)
    return Aggregate(cells[0].method, cells[0].length, k, tokens, nll, ppl, None if se is None else ppl * se, se)


def summarize(cells: list[Cell], methods: list[str], lengths: list[int]) -> list[Aggregate]:
    groups: dict[tuple[str, int], list[Cell]] = {}
    for cell in cells:
        groups.setdefault((cell.method, cell.length), []).append(cell)
    return [aggregate_cells(groups[(m, n)]) for m in methods for n in lengths if (m, n) in groups]


def order_cells(cells: list[Cell], methods: list[str], lengths: list[int], docs: list[str]) -> list[Cell]:
    """A fixed order (method, length, document as the corpus lists them), whatever order cells finished in."""
    rank_m = {m: i for i, m in enumerate(methods)}
    rank_d = {d: i for i, d in enumerate(docs)}
    wanted = [c for c in cells if c.method in rank_m and c.length in lengths and c.doc in rank_d]
    return sorted(wanted, key=lambda c: (rank_m[c.method], c.length, rank_d[c.doc]))


def write_outputs(out: Path, cells: list[Cell], summary: Mapping[str, Any]) -> None:
    """results.json, results.csv and summary.json, each written atomically."""
    rows = [c.to_dict() for c in cells]
    atomic_write_text(out / JSON, json.dumps({"meta": summary.get("meta", {}), "results": rows}, indent=1) + "\n")
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(COLUMNS)
    for row in rows:
        writer.writerow([json.dumps(row[k], sort_keys=True) if k in LIST_COLUMNS else row[k] for k in COLUMNS])
    atomic_write_text(out / CSV, buf.getvalue())
    atomic_write_text(out / SUMMARY, json.dumps(summary, indent=2) + "\n")
