"""eval-tasks rows (one per task x method x length x trial), the append-only log, and what they aggregate to:
mean score with a confidence interval per cell, paired differences against the reference method, and the
effective length per method (RULER's definition)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ropectl.eval.effective import Effective, Point, effective_length, samples_to_decide
from ropectl.eval.stats import mean_interval, paired_difference, wilson_interval
from ropectl.runtime.model import REFERENCE
from ropectl.runtime.rowlog import append_jsonl, read_jsonl, write_results

LOG, JSON, CSV, SUMMARY, PLOT = "tasks.jsonl", "tasks.json", "tasks.csv", "tasks-summary.json", "tasks.png"
COLUMNS = ("model", "method", "params", "task", "length", "trial", "score", "found", "references", "answer_nll",
           "predicted", "expected")


@dataclass(frozen=True)
class Row:
    model: str
    method: str
    task: str
    length: int
    trial: int
    score: float
    found: int
    references: int
    answer_nll: float
    predicted: str  # the decoded greedy output (ruler.score)
    expected: str  # the decoded canonical answer
    params: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ident(self) -> tuple[str, str, int, int]:
        return (self.task, self.method, self.length, self.trial)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["params"] = dict(self.params)
        return {k: out[k] for k in COLUMNS}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Row:
        return cls(str(d["model"]), str(d["method"]), str(d["task"]), int(d["length"]), int(d["trial"]),
                   float(d["score"]), int(d["found"]), int(d["references"]), float(d["answer_nll"]),
                   str(d["predicted"]), str(d["expected"]), dict(d.get("params") or {}))


def append_rows(out: Path, rows: Iterable[Row]) -> None:
    append_jsonl(out / LOG, (r.to_dict() for r in rows))


def read_rows(out: Path) -> list[Row]:
    """Finished trials from the log (a torn or foreign line is skipped)."""
    rows: dict[tuple[str, str, int, int], Row] = {}
    for data in read_jsonl(out / LOG):
        try:
            row = Row.from_dict(data)
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
        rows[row.ident] = row
    return list(rows.values())


@dataclass(frozen=True)
class Score:
    """Mean score of one cell (task or "average") with its 95 % interval over trials."""

    task: str
    method: str
    length: int
    trials: int
    mean: float
    lo: float
    hi: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def scores(rows: list[Row], tasks: list[str], methods: list[str], lengths: list[int]) -> list[Score]:
    """Per (task, method, length); then "average": per trial index, the mean over tasks (RULER averages tasks)."""
    out = []
    for m in methods:
        for n in lengths:
            per_task = {t: _cell(rows, t, m, n) for t in tasks}
            for t, cell in per_task.items():
                if cell:
                    out.append(_score(t, m, n, [r.score for r in cell]))
            if len(tasks) > 1 and all(per_task.values()):
                out.append(_score("average", m, n, _averaged(per_task)))
    return out


def _cell(rows: list[Row], task: str, method: str, length: int) -> list[Row]:
    return sorted((r for r in rows if r.task == task and r.method == method and r.length == length),
                  key=lambda r: r.trial)


def _averaged(per_task: Mapping[str, list[Row]]) -> list[float]:
    return list(trial_average({t: {r.trial: r.score for r in cell} for t, cell in per_task.items()}).values())


def trial_average(per_task: Mapping[str, Mapping[int, float]]) -> dict[int, float]:
    """Trial index -> score averaged over the tasks, for the trials every task has (RULER averages its tasks)."""
    if not per_task:
        return {}
    common = set.intersection(*(set(v) for v in per_task.values()))
    return {i: sum(v[i] for v in per_task.values()) / len(per_task) for i in sorted(common)}


def _score(task: str, method: str, length: int, values: list[float]) -> Score:
    ci = mean_interval(values)
    return Score(task, method, length, ci.n, ci.mean, ci.lo, ci.hi)


def comparisons(rows: list[Row], tasks: list[str], methods: list[str], lengths: list[int]) -> list[dict[str, Any]]:
    """Each method against the reference (none, else the first method), paired trial by trial, per task and
    length and on the task average."""
    ref = next((m for m in REFERENCE if m in methods), methods[0] if methods else None)
    out = []
    for m in (x for x in methods if x != ref):
        for n in lengths:
            for t in [*tasks, "average"] if len(tasks) > 1 else tasks:
                a, b = _paired(rows, tasks, t, m, ref, n)
                if a:
                    d = paired_difference(a, b)
                    out.append({"task": t, "method": m, "reference": ref, "length": n, "trials": d.n, "diff": d.diff,
                                "lo": d.lo, "hi": d.hi, "p_value": d.p_value, "test": d.test,
                                "separable": d.separable})
    return out


def _paired(rows: list[Row], tasks: list[str], task: str, m: str, ref: str | None, n: int
            ) -> tuple[list[float], list[float]]:
    names = tasks if task == "average" else [task]
    a, b = (trial_average({t: {r.trial: r.score for r in _cell(rows, t, x, n)} for t in names}) for x in (m, ref))
    common = sorted(set(a) & set(b))
    return [a[i] for i in common], [b[i] for i in common]


def effective_lengths(table: list[Score], methods: list[str], lengths: list[int], threshold: float,
                      task: str) -> dict[str, Effective]:
    """RULER's threshold under the interval rule (``ropectl.eval.effective``): a length counts when its Wilson lower
    bound is at or above the threshold there and at every shorter length; where the first length that does not
    count straddles the threshold, the effective length is not determined."""
    out: dict[str, Effective] = {}
    for m in methods:
        cells = [s for s in table if s.task == task and s.method == m and s.length in lengths]
        out[m] = effective_length([Point(length=s.length, lo=s.lo, hi=s.hi) for s in cells], threshold)
    return out


def samples_to_decide_cell(table: list[Score], method: str, task: str, effective: Effective,
                           threshold: float) -> int | None:
    """Trials per cell at which the undecided cell's mean would give a Wilson interval clear of the threshold."""
    cell = next((s for s in table if (s.task, s.method, s.length) == (task, method, effective.stopped_at)), None)
    if cell is None or effective.determined:
        return None
    return samples_to_decide(lambda n: wilson_interval(cell.mean * n, n), threshold, cell.trials)


def write_outputs(out: Path, rows: list[Row], summary: Mapping[str, Any]) -> None:
    write_results(out, (JSON, CSV, SUMMARY), [r.to_dict() for r in rows], COLUMNS, summary)


def load_outputs(out: Path) -> dict[str, Any]:
    """tasks.json's meta and per-trial rows {task, method, length, trial, score}, for readers of results (recommend).
    OSError, ValueError and KeyError propagate."""
    data = json.loads((Path(out) / JSON).read_text(encoding="utf-8"))
    rows = [{k: r[k] for k in ("task", "method", "length", "trial", "score")} for r in data["results"]]
    return {"meta": data["meta"], "rows": rows}
