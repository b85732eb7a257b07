"""Passkey rows (one per method x length x depth x trial), the append-only log, and accuracy tables."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ropectl.runtime.rowlog import append_jsonl, read_jsonl, write_results

LOG = "passkey.jsonl"
JSON = "passkey.json"
CSV = "passkey.csv"
SUMMARY = "passkey-summary.json"
PLOT = "passkey.png"
COLUMNS = ("model", "method", "params", "length", "depth", "trial", "key", "success", "answer_nll", "predicted",
           "key_at")


@dataclass(frozen=True)
class Row:
    model: str
    method: str
    length: int
    depth: float
    trial: int
    key: str
    success: bool
    answer_nll: float
    predicted: str  # the decoded argmax tokens at the answer positions
    key_at: int
    params: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ident(self) -> tuple[str, int, float, int]:
        return (self.method, self.length, self.depth, self.trial)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["params"] = dict(self.params)
        if not math.isfinite(out["answer_nll"]):  # strict JSON has no NaN or Infinity: null, read back as NaN
            out["answer_nll"] = None
        return {k: out[k] for k in COLUMNS}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Row:
        return cls(str(d["model"]), str(d["method"]), int(d["length"]), float(d["depth"]), int(d["trial"]),
                   str(d["key"]), bool(d["success"]), math.nan if d["answer_nll"] is None else float(d["answer_nll"]),
                   str(d["predicted"]), int(d["key_at"]),
                   dict(d.get("params") or {}))


def append_rows(out: Path, rows: Iterable[Row]) -> None:
    append_jsonl(out / LOG, (r.to_dict() for r in rows))


def read_rows(out: Path) -> list[Row]:
    """Finished trials: passkey.json of a completed run, then the log (a torn or foreign line is skipped)."""
    rows: dict[tuple[str, int, float, int], Row] = {}
    sources: list[Any] = []
    if (out / JSON).is_file():
        try:
            sources += json.loads((out / JSON).read_text(encoding="utf-8")).get("results", [])
        except (ValueError, AttributeError):
            pass
    sources += read_jsonl(out / LOG)
    for data in sources:
        try:
            row = Row.from_dict(data)
        except (ValueError, KeyError, TypeError):
            continue
        rows[row.ident] = row
    return list(rows.values())


@dataclass(frozen=True)
class Accuracy:
    method: str
    length: int
    depth: float | None  # None: every depth of this length
    trials: int
    correct: int

    @property
    def accuracy(self) -> float:
        return self.correct / self.trials

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "accuracy": self.accuracy}


def accuracies(rows: list[Row], methods: list[str], lengths: list[int], depths: list[float],
               by_depth: bool = True) -> list[Accuracy]:
    out = []
    for m in methods:
        for n in lengths:
            for d in (depths if by_depth else [None]):
                hits = [r for r in rows if r.method == m and r.length == n and (d is None or r.depth == d)]
                if hits:
                    out.append(Accuracy(m, n, d, len(hits), sum(r.success for r in hits)))
    return out


def write_outputs(out: Path, rows: list[Row], summary: Mapping[str, Any]) -> None:
    write_results(out, (JSON, CSV, SUMMARY), [r.to_dict() for r in rows], COLUMNS, summary)


def load_outputs(out: Path) -> dict[str, Any]:
    """passkey.json as the one task ``passkey``: per-trial rows {task, method, length, trial, score}, a trial
    numbered across depths, for readers of results (recommend). OSError, ValueError and KeyError propagate."""
    data = json.loads((Path(out) / JSON).read_text(encoding="utf-8"))
    results, meta = data["results"], data["meta"]
    depths = sorted({float(r["depth"]) for r in results})
    per = max((int(r["trial"]) for r in results), default=0) + 1
    rows = [{"task": "passkey", "method": r["method"], "length": int(r["length"]),
             "trial": depths.index(float(r["depth"])) * per + int(r["trial"]), "score": float(bool(r["success"]))}
            for r in results]
    return {"meta": meta, "rows": rows}
