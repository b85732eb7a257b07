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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ropectl.eval.timing import Timing
from ropectl.io.files import atomic_write_text
from ropectl.output import dumps
from ropectl.recommend import DEFAULT_MAX_REGRESSION, recommend, screen
from ropectl.recommend.plan import Plan, fit_budget, plan_lines, screen_lines, spread
from ropectl.rope.methods import METHODS, as_is_name, default_candidates, unscaled_name

PLAN_FILE = "plan.json"  # the sizes the run chose (a budget's), so --resume runs the same sweeps


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


def candidates(methods: tuple[str, ...], base: float, grid: tuple[float, ...], serve_with: tuple[str, ...],
               ships: str | None = None) -> tuple[list[str], dict[str, str]]:
    """``none``, ``as-is`` where the checkpoint ships a scaling (``ships``; else it is ``none``, measured once), and
    method:factor for each factor of the grid; those the engines would not run, with why."""
    from ropectl.readers import why_not_served

    out, skipped = [unscaled_name(), *([as_is_name()] if ships else [])], {}
    for name in methods:
        why = why_not_served(name, serve_with) if serve_with else None
        # a target within the trained context leaves nothing to scale: a factor of 1 or less is no candidate
        for factor in sorted({round(base * g, 3) for g in grid if round(base * g, 3) > 1}):
            spec = f"{name}:{factor:g}"
            if why:
                skipped[spec] = f"not served as evaluated: {why}"
            elif spec not in out:
                out.append(spec)
    return out, skipped


def applicable(config: Any, methods: list[str]) -> tuple[list[str], dict[str, str]]:
    """The candidates patch would write on this config, and the others with the config's refusal (Phi-3's config
    takes only default and longrope; a shipped scaling that is not re-extendable needs --replace-existing)."""
    from ropectl.errors import RopectlError
    from ropectl.rope.methods import parse_spec
    from ropectl.runtime.model import method_states

    kept, refused = [], {}
    for method in methods:
        try:
            method_states(config, (parse_spec(method),))
        except RopectlError as exc:
            refused[method] = f"patch refuses it on this config: {exc.problem}"
        else:
            kept.append(method)
    return kept, refused


@dataclass(frozen=True, kw_only=True)
class Request:
    """What ``recommend`` asked the sweeps for (the CLI's flags)."""

    target: int
    model: str | None = None
    factor: float | None = None
    out: Path | None = None
    dtype: str = "auto"
    device: str = "auto"
    max_regression: float = DEFAULT_MAX_REGRESSION
    serve_with: tuple[str, ...] = ()
    engine_options: dict[str, Any] = field(default_factory=dict)
    resume: bool = False
    budget_min: float | None = None  # minutes the sweeps may take: documents and samples are sized to it
    sizes: dict[str, Any] = field(default_factory=dict)  # over the generic sizes (extend's --samples, its smoke tests)

    def __post_init__(self) -> None:
        from ropectl.limits import check_budget, check_max_regression

        check_max_regression(self.max_regression)
        check_budget(self.budget_min)


def recommend_root(out: Path | None, resume: bool) -> Path:
    """The folder the sweeps write under: --out; with --resume and no --out the newest runs/recommend-*."""
    from ropectl.runtime.folder import output_dir

    return output_dir(out, resume, "recommend", "recommendation")


def run_sweeps(model: str | None, target: int, factor: float | None, out: Path | None, dtype: str, device: str,
               max_regression: float = DEFAULT_MAX_REGRESSION,
               progress: Callable[[Any], None] | None = None, on_ppl: Callable[[Any], None] | None = None,
               serve_with: tuple[str, ...] = (), engine_options: dict[str, Any] | None = None, resume: bool = False,
               budget_min: float | None = None, say: Callable[[str], None] | None = None,
               sizes: dict[str, Any] | None = None) -> Sweeps:
    """Plan, screen, PPL sweep, task sweep, recommendation; ``say`` gets the plan's lines (the CLI: stderr)."""
    request = Request(model=model, target=target, factor=factor, out=out, dtype=dtype, device=device,
                      max_regression=max_regression, serve_with=serve_with, engine_options=engine_options or {},
                      resume=resume, budget_min=budget_min, sizes=sizes or {})
    return run(request, progress, on_ppl, say)


def run(req: Request, progress: Callable[[Any], None] | None = None, on_ppl: Callable[[Any], None] | None = None,
        say: Callable[[str], None] | None = None) -> Sweeps:
    from ropectl.runtime.reuse import reusing

    with reusing():  # the probe, the screen, the PPL sweep and the task sweep share one load of the model
        return _run(req, progress, on_ppl, say or (lambda line: None))


def _run(req: Request, progress: Callable[[Any], None] | None, on_ppl: Callable[[Any], None] | None,
         say: Callable[[str], None]) -> Sweeps:
    from ropectl.eval.tasks.ppl import build_spec, run_eval
    from ropectl.eval.tasks.ruler.runner import run_tasks
    from ropectl.eval.tasks.ruler.spec import build_tasks_spec

    plan, skipped, _ = plan_grid(req)
    root = recommend_root(req.out, req.resume)
    plan, timing = _sized(req, plan, root, say)
    resume = True if req.resume else None
    common = {"model": req.model, "methods": list(plan.methods), "dtype": req.dtype, "device": req.device,
              **req.engine_options}  # --engine vllm and its parallel sizes, for both sweeps
    # The screen: every method at the shortest in-window length first (cheap); one that regresses there is out
    # whatever the longer lengths say, so the second pass (resuming the same folder) skips its long forwards.
    # An engine whose method switch is not cheap (vLLM starts one per method and length) costs more than the
    # forwards the screen saves: it does not screen.
    screened: tuple[str, ...] = ()
    if plan.screen_at:
        first = run_eval(build_spec(lengths=[plan.screen_at], docs=plan.docs, out=root / "ppl", resume=resume,
                                    **common), progress)
        screened = screen(_as_evidence(first), req.max_regression)
        for line in screen_lines(plan, spread(first.cells, plan.screen_at), plan.without(set(screened)), timing):
            say(line)
    ppl = run_eval(build_spec(lengths=list(plan.lengths), docs=plan.docs, out=root / "ppl",
                              resume=True if plan.screen_at else resume, screened_out=screened, **common), progress)
    if on_ppl:
        on_ppl(ppl)
    evidence = _as_evidence(ppl)
    out_on_ppl = {e.method for e in recommend(evidence, None, req.target, req.max_regression, req.serve_with).evidence
                  if not e.eligible}
    common["methods"] = [m for m in plan.methods if m not in out_on_ppl]
    tasks = run_tasks(build_tasks_spec(tasks=",".join(plan.tasks), lengths=list(plan.task_lengths),
                                       samples=plan.samples, out=root / "tasks", resume=resume, **common), progress)
    final = recommend(evidence, {"meta": tasks.meta, "rows": [r.to_dict() for r in tasks.rows]}, req.target,
                      req.max_regression, req.serve_with)
    return Sweeps(ppl, tasks, final, skipped)


def plan_grid(req: Request) -> tuple[Plan, dict[str, str], int]:
    """The plan at the generic (or demo) sizes, the candidates not measured and why, the trained context."""
    from ropectl.eval.engines import DEFAULT_ENGINE, get_engine
    from ropectl.eval.tasks.ruler import resolve_tasks
    from ropectl.runtime.lengths import parse_lengths
    from ropectl.runtime.model import model_source, ships, trained_context

    sizes = {**(DEMO if req.model is None else GENERIC), **req.sizes}
    config = model_source(req.model).config
    trained, shipped = trained_context(config) or req.target, ships(config)
    grid = (1.0,) if req.factor else sizes["grid"]
    methods, skipped = candidates(sizes["candidates"], req.factor or req.target / trained, grid, req.serve_with,
                                  shipped)
    methods, refused = applicable(config, methods)
    skipped.update(refused)
    inside = parse_lengths(sizes.get("inside") or sorted({max(2, trained // 4), trained}))
    screens = get_engine(req.engine_options.get("engine", DEFAULT_ENGINE)).cheap_method_switch
    task_at = sizes["task_at"]
    task_lengths = sorted({n for n in (int(trained * task_at) if task_at else 0, req.target) if 0 < n <= req.target})
    plan = Plan(tuple(methods), tuple(sorted({*inside, req.target})), sizes["docs"], resolve_tasks(sizes["tasks"]),
                sizes["samples"], tuple(task_lengths), min(inside) if screens else None, shipped)
    return plan, skipped, trained


def _sized(req: Request, plan: Plan, root: Path, say: Callable[[str], None]) -> tuple[Plan, Timing | None]:
    """Time one forward, size documents and samples to --budget (or take a resumed run's), print the plan."""
    from ropectl.eval.engines import DEFAULT_ENGINE
    from ropectl.eval.timing import timed_forward

    engine = req.engine_options.get("engine", DEFAULT_ENGINE)
    timing = timed_forward(req.model, req.device, req.dtype, plan.screen_at, engine) if plan.screen_at else None
    base, stored = plan, _read_sizes(root) if req.resume else None
    if stored:  # a resumed run keeps its sizes: another --docs or --samples would be another run
        plan = replace(plan, **stored)
    elif req.budget_min is not None and timing is not None:
        plan = fit_budget(plan, timing, req.budget_min * 60)
    for line in plan_lines(plan, timing, base, req.budget_min * 60 if req.budget_min is not None else None):
        say(line)
    if req.resume or not (root / "ppl").exists():  # a fresh run into a used folder is refused by the screen
        root.mkdir(parents=True, exist_ok=True)
        atomic_write_text(root / PLAN_FILE, dumps({"docs": plan.docs, "samples": plan.samples}) + "\n")
    return plan, timing


def _read_sizes(root: Path) -> dict[str, int] | None:
    import json

    try:
        data = json.loads((root / PLAN_FILE).read_text())
        return {"docs": int(data["docs"]), "samples": int(data["samples"])}
    except (OSError, ValueError, KeyError, TypeError):  # no plan yet (stopped before it): size afresh
        return None


def _as_evidence(ppl: Any) -> dict[str, Any]:
    """The same dicts recommend reads from the results files (recommend_data), straight from the result."""
    return {"meta": ppl.meta, "table": [a.to_dict() for a in ppl.aggregates], "cells": [c.to_dict() for c in ppl.cells]}
