"""``ropectl recommend``: which method and factor to ship for a target length, and how sure that is.

Every method saw the same documents and the same task trials, so each comparison is paired. The rule, over every
measured method (``none`` included, so "do not scale" can win):
1. Out: a method an engine in ``--serve-with`` would not compute as evaluated; a method whose PPL at a length up
   to the trained context is more than ``max_regression`` above ``none``'s (static YaRN enabled needlessly cost
   Qwen3 a benchmark drop from 39 to 26.5, Qwen3 #1567); a PPL at the target that is not finite.
2. The measured leader: the highest mean task score at the target (RULER-style tasks averaged per trial), then
   the lowest PPL at the target, then the smaller regression, then ``none``, then the name.
3. The leader is crowned only if it separates from every other eligible method: its paired task difference
   excludes 0 (Newcombe's interval, with the exact sign test: McNemar for 0/1 trials), or the tasks tie and its
   paired PPL ratio at the target excludes 1 in its favour on at least ``MIN_DOCS`` documents (fewer give no
   exact test a chance to reject and a t interval on 1 to 4 degrees of freedom). Otherwise the methods it cannot
   be told from tie with it, and the simplest of them ships: ``none`` if it is among them, else the one with the
   smallest in-window regression. Each rival records which evidence separated it (``separated_by``).
Pure functions over the results files: the same files always give the same answer.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass, replace
from typing import Any

from ropectl.errors import DataError, UsageError
from ropectl.eval.stats import (
    min_pairs,
    paired_difference,
    paired_log_ratio,
    samples_to_separate,
    trials_to_separate_binary,
)
from ropectl.recommend.data import load_ppl, load_ppl_runs, load_tasks
from ropectl.recommend.ship import patch_commands, ship_commands, ship_line
from ropectl.runtime.model import AS_IS, REFERENCE

__all__ = ["DEFAULT_MAX_REGRESSION", "MIN_DOCS", "Evidence", "Recommendation", "REFERENCE",
           "Rival", "load_ppl", "load_ppl_runs", "load_tasks", "in_window", "patch_commands", "recommend", "screen",
           "ship_commands", "ship_line"]
DEFAULT_MAX_REGRESSION = 0.05


MIN_DOCS = min_pairs(0.95)  # 6: the fewest documents on which the PPL ratio alone may separate two methods


@dataclass(frozen=True)
class Evidence:
    method: str
    ppl_target: float | None  # None: screened out in-window, never run at the target
    vs_none_target: float | None  # PPL / PPL(none) at the target
    regression: float | None  # max over lengths <= trained of PPL / PPL(none) - 1
    regression_at: int | None
    score: float | None  # mean task score at the target (tasks averaged per trial)
    trials: int
    eligible: bool
    note: str
    rank: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Rival:
    """The leader against one other eligible method at the target, paired."""

    method: str
    separated: bool
    score_diff: float | None = None  # leader - rival, mean task score
    score_lo: float | None = None
    score_hi: float | None = None
    score_p: float | None = None
    trials: int = 0
    trials_needed: int | None = None  # to separate the observed difference (80 % power, 5 % two-sided)
    ppl_ratio: float | None = None  # PPL(leader) / PPL(rival)
    ppl_lo: float | None = None
    ppl_hi: float | None = None
    docs: int = 0
    docs_needed: int | None = None
    ppl_p: float | None = None
    separated_by: tuple[str, ...] = ()  # "tasks", "ppl": the evidence that separated them (empty: not separated)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Recommendation:
    target: int
    trained: int
    max_regression: float
    evidence: tuple[Evidence, ...]  # the winner first, then the measured order
    serve_with: tuple[str, ...] = ()
    leader: str = ""  # the measured best
    rivals: tuple[Rival, ...] = ()
    ships: str | None = None  # the scaling the checkpoint ships ("yarn x2"): what as-is is; None: as-is is none
    ships_known: bool = False  # the results said (eval-ppl records it), or the checkpoint's config did
    ships_type: str | None = None  # its rope type, as the as-is row recorded it (what the engines must serve)

    @property
    def winner(self) -> Evidence:
        return self.evidence[0]

    @property
    def confident(self) -> bool:
        return all(r.separated for r in self.rivals)

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "trained": self.trained, "max_regression": self.max_regression,
                "winner": self.winner.method, "leader": self.leader, "confident": self.confident,
                "serve_with": list(self.serve_with), "ships": self.ships if self.ships_known else "unknown",
                "rivals": [r.to_dict() for r in self.rivals],
                "evidence": [e.to_dict() for e in self.evidence]}


def recommend(ppl: dict[str, Any], tasks: dict[str, Any] | None, target: int,
              max_regression: float = DEFAULT_MAX_REGRESSION, serve_with: tuple[str, ...] = ()) -> Recommendation:
    meta = ppl["meta"]
    trained = meta.get("trained_context")
    if not trained:
        raise DataError("the PPL results do not say the model's trained context", "rerun eval-ppl with this ropectl")
    table = _ppl_table(ppl)
    lengths = sorted({n for _, n in table})
    if target not in lengths:
        raise UsageError(f"the PPL results have no cell at --target-length {target} (measured: "
                         f"{', '.join(map(str, lengths))})", f"pass one of those, or rerun eval-ppl with --lengths "
                         f"including {target}")
    reference = next((m for m in REFERENCE if (m, target) in table), None)
    docs = _docs(ppl.get("cells", []), target)
    trials = _trials(tasks["rows"] if tasks else [], target)
    screened = set(meta.get("screened_out", ()))
    runs = meta.get("runs", {})  # rows of other models (load_ppl_runs): served as their own method says
    found = [_served(_evidence(m, table, trained, target, reference, trials.get(m), max_regression),
                     serve_with, runs.get(m, (None, m))[1], meta.get("method_params", {}).get(m, {}))
             for m in meta["methods"] if (m, target) in table or m in screened]
    ranked = sorted(found, key=_order)
    leader = ranked[0]
    rivals = tuple(compare(leader.method, e.method, trials, docs) for e in ranked[1:] if e.eligible)
    tied = [leader] + [e for e in ranked if e.method in {r.method for r in rivals if not r.separated}]
    winner = leader if len(tied) == 1 or not leader.eligible else _simplest(tied)
    ordered = [winner] + [e for e in ranked if e is not winner]
    return Recommendation(target, trained, max_regression, tuple(replace(e, rank=i + 1) for i, e in enumerate(ordered)),
                          serve_with, leader.method, rivals, meta.get("ships"), "ships" in meta,
                          meta.get("method_params", {}).get(AS_IS, {}).get("rope_type"))


def _simplest(tied: list[Evidence]) -> Evidence:
    """The checkpoint unchanged (as-is) if it is among the tied, else ``none``, else the smallest in-window
    regression (then the lower PPL): shipping nothing new is simplest, then removing a scaling."""
    ref = next((e for name in reversed(REFERENCE) for e in tied if e.method == name), None)
    return ref or min(tied, key=lambda e: (e.regression if e.regression is not None else math.inf, _ppl(e)))


def compare(leader: str, rival: str, trials: dict[str, dict[Any, float]], docs: dict[str, dict[str, Any]]) -> Rival:
    out: dict[str, Any] = {}
    a, b = trials.get(leader, {}), trials.get(rival, {})
    keys = sorted(set(a) & set(b))
    task_sep = task_worse = False
    if keys:
        xs, ys = [a[k] for k in keys], [b[k] for k in keys]
        d = paired_difference(xs, ys)
        task_sep, task_worse = d.separable and d.diff > 0, d.separable and d.diff < 0
        out.update(score_diff=d.diff, score_lo=d.lo, score_hi=d.hi, score_p=d.p_value, trials=d.n,
                   trials_needed=None if d.separable else _trials_needed(xs, ys))
    da, db = docs.get(leader, {}), docs.get(rival, {})
    common = sorted(k for k in set(da) & set(db) if da[k][1] == db[k][1])
    ppl_sep = False
    if common:
        nll_a, nll_b, tokens = [da[k][0] for k in common], [db[k][0] for k in common], [da[k][1] for k in common]
        r = paired_log_ratio(nll_a, nll_b, tokens)  # separable only from MIN_DOCS documents
        ppl_sep = r.separable and r.ratio < 1
        per_doc = [(x - y) / t for x, y, t in zip(nll_a, nll_b, tokens)]
        out.update(ppl_ratio=r.ratio, ppl_lo=r.lo, ppl_hi=r.hi, ppl_p=r.p_value, docs=r.n,
                   docs_needed=None if r.separable else _docs_needed(per_doc))
    by = tuple(name for name, sep in (("tasks", task_sep), ("ppl", ppl_sep and not task_worse)) if sep)
    return Rival(rival, bool(by), separated_by=by, **out)


def _trials_needed(xs: list[float], ys: list[float]) -> int | None:
    if all(v in (0.0, 1.0) for v in (*xs, *ys)):
        n = len(xs)
        return trials_to_separate_binary(sum(x > y for x, y in zip(xs, ys)) / n, sum(x < y for x, y in zip(xs, ys)) / n)
    return _needed([x - y for x, y in zip(xs, ys)])


def _docs_needed(per_doc: list[float]) -> int | None:
    """Documents for the PPL ratio to separate: the paired-t sample size, and never fewer than MIN_DOCS."""
    if not any(per_doc):
        return None
    return max(MIN_DOCS, _needed(per_doc) or MIN_DOCS)


def _needed(diffs: list[float]) -> int | None:
    if len(diffs) < 2:
        return None
    mean = math.fsum(diffs) / len(diffs)
    sd = math.sqrt(math.fsum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1))
    return samples_to_separate(mean, sd) if sd > 0 else None


def _docs(cells: list[dict[str, Any]], target: int) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = defaultdict(dict)
    for c in cells:
        if int(c["length"]) == target:
            out[c["method"]][c["doc"]] = (float(c["nll_sum"]), int(c["tokens"]))
    return out


def _trials(rows: list[dict[str, Any]], target: int) -> dict[str, dict[Any, float]]:
    """method -> trial index -> score averaged over the tasks (trials every task has)."""
    by: dict[str, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for r in rows:
        if int(r["length"]) == target:
            by[r["method"]][r["task"]][int(r["trial"])] = float(r["score"])
    from ropectl.eval.tasks.ruler.results import trial_average

    return {method: trial_average(per_task) for method, per_task in by.items()}


def _served(e: Evidence, serve_with: tuple[str, ...], method: str, params: dict[str, Any]) -> Evidence:
    """Out where an engine would not compute it as evaluated: as-is by the rope type the checkpoint ships (a
    shipped dynamic is static in vLLM), the others by their method."""
    from ropectl.readers import why_not_served
    from ropectl.rope.methods import get_method, parse_spec

    name = parse_spec(method).name
    if not serve_with or get_method(name).unscaled:
        return e
    kind = str(params.get("rope_type") or "") if get_method(name).keeps_checkpoint else name
    why = why_not_served(kind, serve_with) if kind else None
    return e if why is None else replace(e, eligible=False, note=f"not served as evaluated: {why}")


def _order(e: Evidence) -> tuple[Any, ...]:
    return (not e.eligible, -(e.score if e.score is not None else -1.0), _ppl(e),
            e.regression if e.regression is not None else math.inf, e.method not in REFERENCE, e.method)


def _ppl_table(ppl: dict[str, Any]) -> dict[tuple[str, int], float]:
    return {(r["method"], int(r["length"])): float(r["ppl"]) for r in ppl["table"]}


def _ppl(e: Evidence) -> float:
    return e.ppl_target if e.ppl_target is not None else math.inf


def in_window(method: str, table: dict[tuple[str, int], float], trained: int, reference: str | None
              ) -> tuple[float | None, int | None]:
    """The largest PPL(method) / PPL(reference) - 1 over the lengths <= ``trained`` both have, and where."""
    window = [(ppl / table[(reference, n)] - 1, n) for (m, n), ppl in sorted(table.items())
              if m == method and n <= trained and reference and (reference, n) in table]
    return max(window) if window else (None, None)


def screen(ppl: dict[str, Any], max_regression: float = DEFAULT_MAX_REGRESSION) -> tuple[str, ...]:
    """The methods an in-window PPL sweep already rules out (any length up to the trained context more than
    ``max_regression`` worse than ``none``): no longer length and no task score can bring them back."""
    trained = ppl["meta"].get("trained_context") or 0
    table = _ppl_table(ppl)
    reference = next((m for m in REFERENCE if any(k[0] == m for k in table)), None)
    out = []
    for method in ppl["meta"]["methods"]:
        regression, _ = in_window(method, table, trained, reference)
        if regression is not None and regression > max_regression:
            out.append(method)
    return tuple(out)


def _evidence(method: str, table: dict[tuple[str, int], float], trained: int, target: int,
              reference: str | None, trials: dict[Any, float] | None, max_regression: float) -> Evidence:
    ppl = table.get((method, target))
    vs = ppl / table[(reference, target)] if reference and ppl is not None else None
    regression, at = in_window(method, table, trained, reference)
    eligible = regression is None or regression <= max_regression
    if ppl is not None and not math.isfinite(ppl):
        eligible, note = False, "PPL at the target is not finite"
    elif not eligible:
        note = f"in-window regression {regression:+.1%} at {at} > {max_regression:.0%}"
    elif ppl is None:
        eligible, note = False, "screened out in-window, not run at the target (rerun eval-ppl with it there)"
    else:
        note = "" if regression is not None else "no in-window reference (no `none` at those lengths)"
    score = sum(trials.values()) / len(trials) if trials else None
    return Evidence(method, ppl, vs, regression, at, score, len(trials or {}), eligible, note)
