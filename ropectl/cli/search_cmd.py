"""``ropectl search``: scaling parameters found on the model itself, shipped only where they beat the closed form."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ropectl.cli.errors import handle_errors
from ropectl.cli.eval_flags import DeviceOpt, DtypeOpt, ModelOpt, out_option
from ropectl.cli.flags import ForceOpt, JsonOpt, MaxRegressionOpt, opt, parse_held_out, shared
from ropectl.rope.methods import search_spaces

SPACE, BUDGET, FIT, OUT = "Space", "Budget", "Fitness", "Output"
TargetOpt = Annotated[str, shared("--target-length", panel=SPACE, detail="the context to search for.")]


def _space_help() -> str:
    """Every --space from the method registry: stage 1 boxes with their options, then stage 2."""
    spaces = search_spaces()
    parts = [f"{n} ({', '.join(b.name for b in m.search_bounds(2.0))})" for n, m in spaces.items()
             if m.search_bounds is not None and not m.search_per_pair]
    parts += [f"{n} (per-dimension factors, LongRoPE's evolutionary search)" for n, m in spaces.items() if m.search_per_pair]
    default = next((n for n, m in spaces.items() if m.search_default), parts[0])
    return f"{', '.join(parts[:-1])} or {parts[-1]} [default: {default}]."


SpaceOpt = Annotated[Optional[str], opt("--space", panel=SPACE, help=_space_help())]
TrialsOpt = Annotated[Optional[int], shared("--trials", panel=BUDGET, detail="[default: 20 without --budget].")]
BudgetOpt = Annotated[Optional[float], shared("--budget", panel=BUDGET, detail=(
    "the trials stop after the one running then."))]
TimeOpt = Annotated[Optional[str], opt("--time", panel=BUDGET, hidden=True)]  # the old spelling of --budget
SamplerOpt = Annotated[Optional[str], opt("--sampler", panel=BUDGET, help=(
    "tpe or cmaes (Optuna's samplers; not for longrope, whose evolution proposes) [default: tpe]."))]
StorageOpt = Annotated[Optional[str], opt("--storage", panel=BUDGET, help=(
    "Where the Optuna study lives: a database URL or a journal file (FILE.log), for workers sharing one study "
    "[default: sqlite in OUT]."))]
DocsOpt = Annotated[int, shared("--docs", panel=FIT, detail="search documents, at least the target long [default: 3].")]
HeldOpt = Annotated[str, shared("--held-out", panel=FIT, detail=(
    "for the final comparison, disjoint from the search's (6 or more can separate) [default: 6]."))]
SamplesOpt = Annotated[int, shared("--samples", panel=FIT, detail="niah_single_1 trials at the target [default: 2].")]
NoAnswerOpt = Annotated[bool, opt("--no-answer-loss", panel=FIT, help="Fitness: PPL only, no needle answer-token loss.")]
PruneOpt = Annotated[Optional[str], opt("--prune-at", panel=FIT, help=(
    "Lengths above the trained context, below the target, where trials are pruned [default: halfway, where the "
    "target is at least twice the trained context]."))]
GridOpt = Annotated[Optional[str], opt("--grid", panel=FIT, help=(
    "The closed-form grid: multiples of target / trained each candidate method is measured at [default: 1,1.5,2, "
    "recommend's]."))]
DatasetOpt = Annotated[Optional[str], shared("--dataset", panel=FIT, detail="[default: the embedded plays].")]
SeedOpt = Annotated[int, shared("--seed", panel=FIT, detail="sampler, document split and needle draw [default: 0].")]
EmitOpt = Annotated[Optional[str], shared("--emit", panel=OUT, detail="the winner's, instead of OUT/model.")]
ResumeOpt = Annotated[bool, shared("--resume", panel=OUT, detail="the study in --out.")]
PopulationOpt = Annotated[Optional[int], opt("--population", panel=BUDGET, help="longrope: population [default: 8].")]
IterationsOpt = Annotated[Optional[int], opt("--iterations", panel=BUDGET, help="longrope: generations [default: 4].")]


@handle_errors
def search_cmd(
    model: ModelOpt = None, target_length: TargetOpt = "", space: SpaceOpt = None, trials: TrialsOpt = None,
    budget: BudgetOpt = None, time_min: TimeOpt = None, sampler: SamplerOpt = None, storage: StorageOpt = None,
    docs: DocsOpt = 3, held_out: HeldOpt = "6", samples: SamplesOpt = 2, no_answer_loss: NoAnswerOpt = False,
    max_regression: MaxRegressionOpt = None, prune_at: PruneOpt = None, grid: GridOpt = None,
    dataset: DatasetOpt = None, seed: SeedOpt = 0,
    dtype: DtypeOpt = None, device: DeviceOpt = None, out: out_option("search") = None, emit: EmitOpt = None,
    resume: ResumeOpt = False, force: ForceOpt = False, json_out: JsonOpt = False, population: PopulationOpt = None,
    iterations: IterationsOpt = None,
) -> None:
    """Search a method's parameters on the model itself, in one Optuna study (LongRoPE's evolution proposes for
    --space longrope).

    Measures the closed-form grid (recommend's) first, then trials: PPL above the trained context shortest first
    (pruned there) plus the needle's answer-token loss at the target, each under an in-window PPL limit. Held-out
    documents decide: the found parameters ship only if their paired PPL interval at the target is below the
    closed form's and they retrieve no fewer needles; else the closed form ships. Prints the estimated cost first,
    the spec to pass to every command (-m), and writes OUT/model through `ropectl patch` (or --emit flags).
    """
    from ropectl.recommend import DEFAULT_MAX_REGRESSION
    from ropectl.runtime.folder import output_dir
    from ropectl.runtime.lengths import parse_length, parse_lengths
    from ropectl.search.output import run_search
    from ropectl.search.run import SearchRequest
    from ropectl.search.spaces import default_space

    _refuse_early(target_length, time_min)
    folder = output_dir(out, resume, "search", "search")
    count, named = parse_held_out(held_out)
    req = SearchRequest(
        model=model, target=parse_length(target_length), space=space or default_space(), out=Path(folder),
        trials=trials, minutes=budget, sampler=sampler, storage=storage, docs=docs, held_out=count,
        held_out_docs=named, samples=samples, answer_loss=not no_answer_loss,
        max_regression=DEFAULT_MAX_REGRESSION if max_regression is None else max_regression, seed=seed,
        dataset=dataset, dtype=dtype or "auto", device=device or "auto",
        lengths=parse_lengths(prune_at) if prune_at else (), resume=resume, grid=_grid(grid), force=force, emit=emit,
        population=population, iterations=iterations)
    try:
        result = run_search(req, lambda line: typer.echo(line, err=True))
    except KeyboardInterrupt as exc:  # printed by the one handler (cli.errors)
        from ropectl.runtime.interrupt import Interrupted, resume_line, terminated

        raise Interrupted(f"search stopped: finished trials are kept in {folder}", "rerun the same command with "
                          "--resume", terminated=terminated(exc), resume=resume_line(folder)) from None
    _show(result, json_out)


def _refuse_early(target_length: str, time_min: str | None) -> None:
    """What the CLI alone can refuse, before the output folder is named."""
    from ropectl.errors import UsageError

    if not target_length:
        raise UsageError("--target-length is required", "pass the context to search for, e.g. -t 16k")
    if time_min is not None:
        raise UsageError("search's --time is now --budget: minutes, as in recommend (the trial count is --trials)",
                         f"pass --budget {time_min}")


def _show(result: Any, json_out: bool) -> None:
    """The report and best.spec on stdout (or the summary as JSON), the written model's warnings on stderr."""
    from ropectl.output import dumps

    if json_out:
        typer.echo(dumps(result.summary))
        return
    for line in result.lines:
        typer.echo(line)
    typer.echo(f"best.spec: {result.spec}")
    written = result.summary.get("output") or {}
    for warning in written.get("warnings", []):
        typer.echo(f"warning: {warning}", err=True)
    if (written.get("emit") or {}).get("command"):
        typer.echo(written["emit"]["command"])  # the serving line, as `ropectl patch --emit` prints it
    if written.get("path"):
        typer.echo(f"written: {written['path']} (re-run eval-ppl / eval-tasks / patch with -m '{result.spec}')")


def _grid(text: str | None) -> tuple[float, ...]:
    from ropectl.errors import UsageError
    from ropectl.search.run import GRID

    if text is None:
        return GRID
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        values = ()
    if not values or any(not v >= 1 for v in values):
        raise UsageError(f"--grid '{text}' is not a list of multiples of 1 or more", "pass e.g. --grid 1,1.5,2")
    return values


def register(app: typer.Typer) -> None:
    app.command("search")(search_cmd)
