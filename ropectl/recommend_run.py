"""``recommend`` without results folders: run eval-ppl and eval-tasks on ``none`` and a small grid of candidate
methods and factors, every one of them an engine in ``--serve-with`` computes as evaluated, then rank.

The grid: each candidate method at ``target / trained`` times 1, 1.5 and 2 (1 and 2 in the embedded demo), so
the answer is a method and a factor. A method the engines would not run as evaluated (dynamic for llama.cpp or
vLLM) is not measured at all, and the reason is kept for the report. A method the PPL sweep already rules out
(its in-window regression) gets no task trials, and one that regresses at the shortest in-window length
no forward at the longer lengths either: no score could bring it back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ropectl.recommend import DEFAULT_MAX_REGRESSION, recommend, screen
from ropectl.rope.methods import METHODS, default_candidates, unscaled_name


def _demo_candidates() -> tuple[str, ...]:
    """One method of each kind, the first default candidate of each: a fixed scaling (yarn) and one whose frequencies change
    with the length (dynamic)."""
    return tuple(next(n for n in default_candidates() if METHODS[n].length_dependent == kind) for kind in (False, True))


# The embedded demo (SmolLM2-135M, trained 8k, 10k target): sized to about 10 minutes of 2 CPU cores.
# Tasks run at the target; the demo also at half the trained context ("task_at" x trained), so its effective
# length reads across the trained context (a real model's sweep keeps to the target: each length costs trials).
# The candidates are the method records' ``candidate_order``.
DEMO = {"candidates": _demo_candidates(), "grid": (1.0, 2.0), "inside": ["2k"], "docs": 2,
        "tasks": "niah_single_1", "samples": 2, "task_at": 0.5}
GENERIC = {"candidates": default_candidates(), "grid": (1.0, 1.5, 2.0), "docs": 8,
           "tasks": "niah_single_1,niah_multikey_2,niah_multivalue,vt,fwe", "samples": 25, "task_at": None}


@dataclass(frozen=True)
class Sweeps:
    ppl: Any  # EvalResult
    tasks: Any  # TasksResult
    recommendation: Any
    skipped: dict[str, str]  # method -> why it was not measured


def candidates(methods: tuple[str, ...], base: float, grid: tuple[float, ...], serve_with: tuple[str, ...]
               ) -> tuple[list[str], dict[str, str]]:
    """``none`` and method:factor for each factor of the grid; those the engines would not run, with why."""
    from ropectl.engines import why_not_served

    out, skipped = [unscaled_name()], {}
    for name in methods:
        why = why_not_served(name, serve_with) if serve_with else None
        for factor in sorted({round(max(1.0, base * g), 3) for g in grid}):
            spec = f"{name}:{factor:g}"
            if why:
                skipped[spec] = why
            elif spec not in out:
                out.append(spec)
    return out, skipped


def run_sweeps(model: str | None, target: int, factor: float | None, out: Path | None, dtype: str, device: str,
               max_regression: float = DEFAULT_MAX_REGRESSION,
               progress: Callable[[Any], None] | None = None, on_ppl: Callable[[Any], None] | None = None,
               serve_with: tuple[str, ...] = (), engine_options: dict[str, Any] | None = None) -> Sweeps:
    from ropectl.eval.reuse import reusing

    with reusing():  # the screen, the PPL sweep and the task sweep share one load of the model
        return _run(model, target, factor, out, dtype, device, max_regression, progress, on_ppl, serve_with,
                    engine_options)


def _run(model: str | None, target: int, factor: float | None, out: Path | None, dtype: str, device: str,
         max_regression: float, progress: Callable[[Any], None] | None, on_ppl: Callable[[Any], None] | None,
         serve_with: tuple[str, ...], engine_options: dict[str, Any] | None) -> Sweeps:
    from ropectl.eval.engines import DEFAULT_ENGINE, engine_name
    from ropectl.eval.model import model_source, trained_context
    from ropectl.eval.options import parse_lengths
    from ropectl.eval.tasks.ppl import build_spec, run_eval
    from ropectl.eval.tasks.ruler.runner import run_tasks
    from ropectl.eval.tasks.ruler.spec import build_tasks_spec

    sizes = DEMO if model is None else GENERIC
    trained = trained_context(model_source(model).config) or target
    grid = (1.0,) if factor else sizes["grid"]
    methods, skipped = candidates(sizes["candidates"], factor or target / trained, grid, serve_with)
    inside = parse_lengths(sizes.get("inside") or sorted({max(2, trained // 4), trained}))
    root = out or Path("runs") / f"recommend-{datetime.now():%Y%m%d-%H%M%S}"
    common = {"model": model, "methods": methods, "dtype": dtype, "device": device,
              **(engine_options or {})}  # --engine vllm and its parallel sizes, for both sweeps
    # The screen: every method at the shortest in-window length first (cheap); one that regresses there is out
    # whatever the longer lengths say, so the second pass (resuming the same folder) skips its long forwards.
    # vLLM starts an engine per method and length, which costs more than the forwards the screen saves.
    screens = engine_name(common.get("engine", DEFAULT_ENGINE)) == DEFAULT_ENGINE
    screened: tuple[str, ...] = ()
    if screens:
        first = run_eval(build_spec(lengths=[min(inside)], docs=sizes["docs"], out=root / "ppl", **common), progress)
        screened = screen(_as_evidence(first), max_regression)
    ppl = run_eval(build_spec(lengths=[*inside, target], docs=sizes["docs"], out=root / "ppl",
                              resume=screens or None, screened_out=screened, **common), progress)  # the same folder
    if on_ppl:
        on_ppl(ppl)
    evidence = _as_evidence(ppl)
    out_on_ppl = {e.method for e in recommend(evidence, None, target, max_regression, serve_with).evidence
                  if not e.eligible}
    common["methods"] = [m for m in methods if m not in out_on_ppl]
    inside_at = sizes["task_at"]
    task_lengths = sorted({n for n in (int(trained * inside_at) if inside_at else 0, target) if 0 < n <= target})
    tasks = run_tasks(build_tasks_spec(tasks=sizes["tasks"], lengths=task_lengths, samples=sizes["samples"],
                                       out=root / "tasks", **common), progress)
    final = recommend(evidence, {"meta": tasks.meta, "rows": [r.to_dict() for r in tasks.rows]}, target, max_regression,
                      serve_with)
    return Sweeps(ppl, tasks, final, skipped)


def _as_evidence(ppl: Any) -> dict[str, Any]:
    """The same dicts recommend reads from the results files (recommend_data), straight from the result."""
    return {"meta": ppl.meta, "table": [a.to_dict() for a in ppl.aggregates], "cells": [c.to_dict() for c in ppl.cells]}
