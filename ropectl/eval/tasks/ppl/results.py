"""Long-form results (one row per method x length x document), the append-only log, and aggregation.

Aggregation is token-weighted: PPL = exp(sum NLL / sum tokens) over the documents measured at a length,
not a mean of per-document or per-window perplexities. The standard error is across documents: the
delta-method (linearised) standard error of that ratio estimator, propagated to PPL as PPL x s.e.(mean NLL).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ropectl.limits import MAX_LINE_BYTES
from ropectl.runtime.rowlog import append_jsonl, write_results

LOG = "results.jsonl"
JSON = "results.json"
CSV = "results.csv"
SUMMARY = "summary.json"
PLOT = "ppl.png"
INVALID = "log rows that are not valid cells (unreadable, tokens 0, NaN or negative loss)"
FOREIGN = "log rows of another run (another model, dataset, mode, stride or dtype)"
COLUMNS = ("model", "method", "params", "length", "doc", "tokens", "nll_sum", "ppl", "mode", "stride", "bucket",
           "bucket_nll", "bucket_tokens", "run")
LIST_COLUMNS = ("params", "bucket_nll", "bucket_tokens")  # JSON-encoded in the CSV


@dataclass(frozen=True)
class Cell:
    """One finished (method, length, document) measurement of one run (``run``: its identity hash)."""

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
    run: str = ""  # the hash of the run's identity: --resume uses only cells of its own run

    @property
    def ppl(self) -> float:
        return math.exp(self.nll_sum / self.tokens)

    @property
    def key(self) -> tuple[str, int, str]:
        return (self.method, self.length, self.doc)

    @property
    def finite(self) -> bool:
        return (self.tokens > 0 and math.isfinite(self.nll_sum) and self.nll_sum >= 0 and math.isfinite(self.ppl)
                and all(math.isfinite(x) for x in self.bucket_nll))

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["params"] = dict(self.params)
        out["bucket_nll"], out["bucket_tokens"] = list(self.bucket_nll), list(self.bucket_tokens)
        out["ppl"] = self.ppl
        return {k: out[k] for k in COLUMNS}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Cell:
        """A cell from a log row; raises ValueError on anything a measurement cannot be."""
        tokens, length, nll, stride = d["tokens"], d["length"], d["nll_sum"], d.get("stride")
        ints = (tokens, length) + (() if stride is None else (stride,))
        if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in ints):
            raise ValueError("tokens, length and stride must be positive integers")
        if isinstance(nll, bool) or not isinstance(nll, (int, float)):
            raise ValueError("nll_sum is not a number")
        if not all(isinstance(d[k], str) for k in ("model", "method", "doc", "run")):
            raise ValueError("model, method, doc and run must be strings")
        cell = cls(d["model"], d["method"], length, d["doc"], tokens, float(nll), str(d.get("mode", "truncate")),
                   stride, dict(d.get("params") or {}), d.get("bucket"),
                   tuple(float(x) for x in d.get("bucket_nll") or ()), tuple(int(x) for x in d.get("bucket_tokens") or ()),
                   run=d["run"])
        if not cell.finite:
            raise ValueError(f"nll_sum {nll} over {tokens} tokens is not a finite loss")
        return cell


def append_cells(out: Path, cells: Iterable[Cell]) -> None:
    """Append finished cells to results.jsonl at once (an interrupted run keeps them)."""
    append_jsonl(out / LOG, (c.to_dict() for c in cells))


@dataclass(frozen=True)
class LogRead:
    """The cells of one run found in --out, and what was skipped and why (reason -> count)."""

    cells: tuple[Cell, ...]
    skipped: Mapping[str, int]

    def warnings(self) -> list[str]:
        then = {INVALID: "those cells are measured again", FOREIGN: "they are not used"}
        return [f"--resume skipped {n} {why}; {then[why]}" for why, n in self.skipped.items()]


def read_cells(out: Path, run: str) -> LogRead:
    """Cells of run ``run`` in results.json (a completed run) and the log; nothing else is trusted.

    A row of another run, a line that is not UTF-8 JSON, or a cell whose loss is not finite is skipped and
    counted; a torn last line (an interrupted write) is skipped silently.
    """
    cells: dict[tuple[str, int, str], Cell] = {}
    skipped: Counter[str] = Counter()
    for row, torn in _rows(out):
        try:
            cell = Cell.from_dict(row)
        except (ValueError, KeyError, TypeError, AttributeError):
            skipped[INVALID] += not torn
            continue
        if cell.run != run:
            skipped[FOREIGN] += 1
            continue
        cells[cell.key] = cell
    return LogRead(tuple(cells.values()), {k: n for k, n in skipped.items() if n})


def _rows(out: Path) -> Iterator[tuple[Any, bool]]:
    """(parsed JSON or None, is-torn-last-line) for results.json rows, then each results.jsonl line."""
    final = out / JSON
    if final.is_file():
        try:
            data = json.loads(final.read_bytes()[:MAX_LINE_BYTES].decode("utf-8"))
            yield from ((row, False) for row in data.get("results", []))
        except (ValueError, AttributeError, RecursionError):
            yield None, False
    log = out / LOG
    if not log.is_file():
        return
    with log.open("rb") as fh:
        while line := fh.readline(MAX_LINE_BYTES):
            torn = not line.endswith(b"\n")
            if not line.strip():
                continue
            try:
                yield json.loads(line.decode("utf-8")), torn and not fh.peek(1)
            except (ValueError, RecursionError):
                yield None, torn and not fh.peek(1)


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
    write_results(out, (JSON, CSV, SUMMARY), [c.to_dict() for c in cells], COLUMNS, summary, LIST_COLUMNS)


def load_outputs(out: Path) -> dict[str, Any]:
    """What a finished run's files say, for readers of results (recommend): summary.json's meta and table, and
    results.json's per-document cells where that file exists. OSError, ValueError and KeyError propagate."""
    data = json.loads((Path(out) / SUMMARY).read_text(encoding="utf-8"))
    data["meta"], data["table"]  # noqa: B018  # both must be there
    cells = Path(out) / JSON
    if cells.is_file():
        rows = json.loads(cells.read_text(encoding="utf-8"))["results"]
        data["cells"] = [{k: r[k] for k in ("method", "length", "doc", "tokens", "nll_sum")} for r in rows]
    return data
