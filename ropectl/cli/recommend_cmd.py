"""``ropectl recommend``: the method and factor to ship for a target length, with the evidence."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ropectl.cli.errors import handle_errors
from ropectl.cli.eval_flags import (
    DeviceOpt,
    DtypeOpt,
    EngineOpt,
    ExecutorOpt,
    ModelOpt,
    PipelineParallelOpt,
    TensorParallelOpt,
    opt,
    progress_bar,
)
from ropectl.cli.flags import JsonOpt, MaxRegressionOpt, shared
from ropectl.cli.ppl_cmd import print_table
from ropectl.eval.engines import engine_names
from ropectl.output import dumps

IN, RULE = "Inputs", "Rule"
TargetOpt = Annotated[str, shared("--target-length", panel=RULE, detail="the context to ship.")]
PplOpt = Annotated[Optional[list[Path]], opt("--ppl", panel=IN, help=(
    "An eval-ppl --out folder to read (no new run). Repeat it for runs of other models on the same documents "
    "(a patched model, then its fine-tune): their rows are named by the model folder and compared paired."))]
TasksOpt = Annotated[Optional[Path], opt("--tasks", "--passkey", panel=IN, help=(
    "An eval-tasks (or eval-passkey) --out folder to read (with --ppl): per-trial scores at the target."))]
FactorOpt = Annotated[Optional[float], shared("--factor", panel=RULE, detail=(
    "one for every candidate, instead of the grid target / trained x 1, 1.5, 2 (the embedded demo: x 1, 2)."))]
OutOpt = Annotated[Optional[Path], opt("--out", "-o", panel=IN, help=(
    "Where the sweeps write when they run: OUT/ppl and OUT/tasks [default: runs/recommend-<timestamp>]."))]
ResumeOpt = Annotated[bool, shared("--resume", panel=IN, detail=(
    "--out (default: the newest runs/recommend-*): the screen, the PPL and the task sweeps skip the cells and "
    "trials they finished, with the sizes the run chose."))]
BudgetOpt = Annotated[Optional[float], shared("--budget", panel=RULE, detail=(
    "the sweeps take fewer documents and task samples (at least 6 and 6) until the estimate from timed forwards "
    "fits; the plan printed first says the sizes and the differences they can separate. Sizes that already fit "
    "(a GPU) are kept."))]


def serving_names() -> list[str]:
    """What --serve-with takes: the serving readers (readers.serving_engines), then every evaluation engine
    registered."""
    from ropectl.readers import serving_engines

    known = serving_engines()
    return [*known, *(n for n in engine_names() if n not in known)]


def _serve_help_names() -> list[str]:
    """The serving readers written out (deriving them imports every reader at start-up; tests/readers/
    test_serving_registry.py checks the list), then every evaluation engine registered."""
    readers = ("transformers", "vllm", "sglang", "llama.cpp")
    return [*readers, *(n for n in engine_names() if n not in readers)]


ServeOpt = Annotated[Optional[str], opt("--serve-with", panel=RULE, help=(
    f"Engines the checkpoint will be served with, comma-separated: {', '.join(_serve_help_names())}. A method one of "
    "them would not compute as evaluated is out [default: every engine the format reaches; a GGUF: llama.cpp]."))]


def serve_with_engines(value: str | None, model: str) -> tuple[str, ...]:
    from ropectl.errors import UsageError
    from ropectl.readers import serving_engines_for

    if value is None:
        return serving_engines_for(model)
    engines = tuple(e.strip() for e in value.split(",") if e.strip())
    known = serving_names()
    unknown = [e for e in engines if e not in known]
    if unknown or not engines:
        raise UsageError(f"unknown --serve-with engine '{(unknown or [value])[0]}'",
                         f"use a comma-separated list of {', '.join(known)}")
    return engines


@handle_errors
def recommend_cmd(
    model: ModelOpt = None, target_length: TargetOpt = "", ppl: PplOpt = None, tasks: TasksOpt = None,
    factor: FactorOpt = None, max_regression: MaxRegressionOpt = None, dtype: DtypeOpt = None, device: DeviceOpt = None,
    out: OutOpt = None, serve_with: ServeOpt = None, json_out: JsonOpt = False, engine: EngineOpt = None,
    tensor_parallel_size: TensorParallelOpt = None, pipeline_parallel_size: PipelineParallelOpt = None,
    distributed_executor_backend: ExecutorOpt = None, resume: ResumeOpt = False, budget: BudgetOpt = None,
) -> None:
    """Rank RoPE methods and factors for --target-length, and say how sure: paired task scores and PPL.

    Reads eval-ppl / eval-tasks results (--ppl, --tasks) or runs both on none and a grid of factors. A leader
    that does not separate from the others is not crowned: the simplest of the tied ships. The PPL ratio alone
    separates only on 6 documents or more (fewer leave no exact test able to reject). Prints the evidence,
    which of it separated (tasks, PPL ratio), the decision and the `ropectl patch` commands that ship it.

    Before it runs the sweeps it prints the plan on stderr: cells, trials, an estimate from two timed forwards
    (--budget sizes the run to it) and the differences the sizes can separate. Stopped (Ctrl-C, SIGTERM), it
    prints the command that resumes it.
    """
    from ropectl.errors import UsageError
    from ropectl.recommend import DEFAULT_MAX_REGRESSION
    from ropectl.runtime.lengths import parse_length

    if not target_length:
        raise UsageError("--target-length is required", "pass the context you want to ship, e.g. --target-length 16k")
    target, limit = parse_length(target_length), DEFAULT_MAX_REGRESSION if max_regression is None else max_regression
    engine_options = {k: v for k, v in dict(engine=engine, tensor_parallel_size=tensor_parallel_size,
                                            pipeline_parallel_size=pipeline_parallel_size,
                                            distributed_executor_backend=distributed_executor_backend).items() if v}
    runs: dict[str, list[str]] = {}
    if ppl:  # typer gives an empty list for no --ppl
        _refuse_with_results(ppl, tasks, resume, budget, engine_options)
        result, model_name, skipped, runs = _from_results(model, ppl, tasks, target, limit, serve_with)
    else:
        from ropectl.recommend.run import Request

        if tasks is not None:
            raise UsageError("--tasks needs --ppl", "pass both results folders, or neither to run the sweeps")
        engines = serve_with_engines(serve_with, model or _default_path())
        sweeps = _run_sweeps(Request(model=model, target=target, factor=factor, out=out, dtype=dtype or "auto",
                                     device=device or "auto", max_regression=limit, serve_with=engines,
                                     engine_options=engine_options, resume=resume, budget_min=budget), json_out)
        result, model_name, skipped = sweeps.recommendation, model or _default_path(), sweeps.skipped
    if json_out:
        typer.echo(dumps({**result.to_dict(), "not_measured": skipped,
                          "commands": _commands(model_name, result, runs)}))
        return
    print_recommendation(result, model_name, skipped, runs)


def _refuse_with_results(ppl: list[Path], tasks: Path | None, resume: bool, budget: float | None,
                         engine_options: dict[str, Any]) -> None:
    """The flags that have no meaning when recommend reads results instead of running the sweeps."""
    from ropectl.errors import UsageError

    if tasks is not None and len(ppl) > 1:
        raise UsageError("--tasks holds one model's trials, but several --ppl runs were given",
                         "compare the models on PPL alone (drop --tasks), or pass one --ppl with --tasks")
    if resume or budget is not None:
        raise UsageError("--resume and --budget apply when recommend runs the sweeps",
                         "drop them with --ppl, or drop --ppl / --tasks to run the sweeps")
    if engine_options:
        raise UsageError("--engine and the vLLM parallel options apply when recommend runs the sweeps",
                         "drop them with --ppl, or drop --ppl / --tasks to run the sweeps")


def _from_results(model: str | None, ppl: list[Path], tasks: Path | None, target: int, limit: float,
                  serve_with: str | None) -> tuple[Any, str, dict[str, str], dict[str, list[str]]]:
    """The recommendation from eval-ppl / eval-tasks folders: (result, model, not measured, runs)."""
    from ropectl.limits import check_max_regression
    from ropectl.recommend import load_ppl_runs, load_tasks, recommend
    from ropectl.recommend.data import with_ships

    check_max_regression(limit)
    ppl_data = load_ppl_runs(ppl)
    runs = ppl_data["meta"].get("runs", {})
    model_name = model or ppl_data["meta"]["model"]
    ppl_data = with_ships(ppl_data, _model_arg(model_name))
    engines = serve_with_engines(serve_with, _model_arg(model_name))
    return recommend(ppl_data, load_tasks(tasks) if tasks else None, target, limit, engines), model_name, {}, runs


def _run_sweeps(request: Any, json_out: bool) -> Any:
    """The sweeps under the progress bar, the plan on stderr, the task table after them (not with --json);
    stopped, one line with the command that resumes the whole recommendation (this command, --resume, its --out),
    exit 130 (Ctrl-C) or 143 (SIGTERM)."""
    from dataclasses import replace

    from ropectl.cli.tasks_cmd import print_tasks_table
    from ropectl.recommend.run import recommend_root, run
    from ropectl.runtime.interrupt import SweepInterrupted, resume_line

    root = recommend_root(request.out, request.resume)
    try:
        with progress_bar(enabled=not json_out) as on_progress:
            sweeps = run(replace(request, out=root), on_progress, None if json_out else print_table,
                         lambda line: typer.echo(line, err=True))
        if not json_out:
            print_tasks_table(sweeps.tasks)
        return sweeps
    except SweepInterrupted as exc:  # printed by the one handler (cli.errors); the resume line resumes recommend
        unit = "trials" if exc.out == root / "tasks" else "cells"
        raise exc.retold(f"{exc.what}: {exc.kept} finished {unit} kept in {exc.out}", resume_line(root)) from None


def _default_path() -> str:
    from ropectl.runtime.model import default_model_path

    return str(default_model_path())


def _commands(model: str, result: Any, runs: dict[str, list[str]] | None = None) -> list[str]:
    from ropectl.recommend import ship_commands

    return ship_commands(_model_arg(model), result, runs)


def _model_arg(model: str) -> str:
    """Results name the embedded default by a label; the patch command needs its path."""
    from ropectl.runtime.model import DEFAULT_MODEL_LABEL

    return _default_path() if model == DEFAULT_MODEL_LABEL else model


def print_recommendation(result: Any, model: str, skipped: dict[str, str] | None = None,
                         runs: dict[str, list[str]] | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    from ropectl.runtime.lengths import length_label

    t = length_label(result.target)
    table = Table(title=f"recommendation for {t} tokens (trained context {length_label(result.trained)})")
    for col in ("rank", "method", f"PPL @ {t}", "÷ none", f"in-window regression (≤ {length_label(result.trained)})",
                f"tasks @ {t}", "note"):
        table.add_column(col, justify="left" if col in ("method", "note") else "right")
    for e in result.evidence:
        reg = "-" if e.regression is None else f"{e.regression:+.1%} @ {length_label(e.regression_at)}"
        score = "-" if e.score is None else f"{e.score:.0%} (n={e.trials})"
        vs = "-" if e.vs_none_target is None else f"{e.vs_none_target:.3f}"
        note = "not served as evaluated (below)" if e.note.startswith("not served") else e.note
        ppl = "-" if e.ppl_target is None else f"{e.ppl_target:.2f}"  # screened out: never run at the target
        table.add_row(str(e.rank), e.method, ppl, vs, reg, score, note or ("ok" if e.eligible else ""))
    console = Console()
    console.print(table)
    for e in result.evidence:  # the reasons in full: a table cell wraps them out of sight
        if e.note.startswith("not served as evaluated"):
            console.print(f"{e.method}: {e.note}", soft_wrap=True, markup=False)
    for method, why in (skipped or {}).items():
        console.print(f"{method}: not measured, {why}", soft_wrap=True, markup=False)
    console.print("rule: drop methods more than "
                  f"{result.max_regression:.0%} worse than none at any length ≤ the trained context; lead with the "
                  "highest task score at the target, then the lowest PPL; crown the leader only if it separates "
                  "from each other method (paired, 95 %); else ship the simplest of the tied.", soft_wrap=True)
    for line in decision_lines(result):
        console.print(line, soft_wrap=True, markup=False)
    from ropectl.recommend import ship_line
    from ropectl.recommend.ship import unmeasured_line

    missing = unmeasured_line(result)
    if missing:
        console.print(missing, soft_wrap=True, markup=False)
    console.print(ship_line(result, t, runs), soft_wrap=True, markup=False)
    for line in _commands(model, result, runs):
        typer.echo(f"  {line}")


def decision_lines(result: Any) -> list[str]:
    """How sure: each rival of the measured leader, with the paired intervals, which evidence separated them
    (tasks, PPL ratio or both) and what would separate them."""
    from ropectl.recommend import MIN_DOCS

    lines = []
    for r in result.rivals:
        parts = []
        if r.score_diff is not None:
            parts.append(f"tasks {r.score_diff:+.0%} [{r.score_lo:+.0%}, {r.score_hi:+.0%}], p={r.score_p:.2g}, "
                         f"n={r.trials}" + (f" (about {r.trials_needed} trials to separate)" if r.trials_needed else ""))
        if r.ppl_ratio is not None:
            few = f", fewer than {MIN_DOCS}: not separated on PPL" if r.docs < MIN_DOCS else ""
            parts.append(f"PPL ratio {r.ppl_ratio:.4f} [{r.ppl_lo:.4f}, {r.ppl_hi:.4f}], {r.docs} docs{few}"
                         + (f" (about {r.docs_needed} docs to separate)" if r.docs_needed else ""))
        names = {"tasks": "tasks", "ppl": "PPL ratio"}
        verdict = f"separated by {' and '.join(names[b] for b in r.separated_by)}" if r.separated else "not separable"
        lines.append(f"{result.leader} vs {r.method}: {verdict}: " + ("; ".join(parts) or "no paired data"))
    if result.confident:
        lines.append(f"confidence: {result.leader} separates from every other eligible method (paired, 95 %).")
    else:
        tied = [r.method for r in result.rivals if not r.separated]
        lines.append(f"confidence: not separable: {result.leader} (measured best) cannot be told from "
                     f"{', '.join(tied)} at this sample size; shipping the simplest of them: {result.winner.method}.")
    return lines


def register(app: typer.Typer) -> None:
    app.command("recommend")(recommend_cmd)
