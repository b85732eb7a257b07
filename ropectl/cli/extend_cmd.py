"""``ropectl extend``: one command from a model to an extended checkpoint that proves itself."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ropectl.cli import eval_flags as eo
from ropectl.cli.errors import handle_errors
from ropectl.cli.flags import JsonOpt, ModelArg, max_regression_opt, opt, shared
from ropectl.cli.recommend_cmd import ServeOpt
from ropectl.cli.report_cmd import RetentionOpt

RUN, DATA, RULE, STAGES = eo.RUN, eo.DATA, "Rule", "Stages"
TargetOpt = Annotated[str, shared("--target-length", panel=RULE, detail="the context to reach.")]
OutOpt = Annotated[Optional[Path], opt("--out", "-o", panel=eo.OUT, help=(
    "The extension's folder: model/ (or model.gguf), EXTENSION.md, extension.json, data/ (the four splits), "
    "stages/ (each stage's own output)."))]
BudgetOpt = Annotated[Optional[float], shared("--budget", panel=RULE, detail=(
    "shared among the stages (zero-shot 15 %, search 20 %, finetune 35 %, acceptance 30 %); refused when "
    "acceptance's share cannot hold one sample per length [default: no limit, each stage at its defaults]."))]
RegressionOpt = Annotated[Optional[float], max_regression_opt(
    0.01, ": in every stage, and acceptance's retention rule")]
SearchOpt = Annotated[str, opt("--search", panel=STAGES, help=(
    "auto, never or always. auto: search when the best zero-shot candidate is not reached and the budget holds "
    "2 trials or more [default: auto]."))]
FinetuneOpt = Annotated[str, opt("--finetune", panel=STAGES, help=(
    "auto, never or always (PoSE, finetune's defaults). auto: when the best zero-shot candidate is not reached "
    "and the budget holds 20 steps or more [default: auto]."))]
TrialsOpt = Annotated[Optional[int], shared("--trials", panel=STAGES, detail=(
    "the search stage's [default: as many as the budget's share holds; 12 with no --budget]."))]
StepsOpt = Annotated[Optional[int], shared("--steps", panel=STAGES, detail=(
    "the finetune stage's [default: as many as the budget's share holds; finetune's 200 with no --budget]."))]
FactorOpt = Annotated[Optional[float], shared("--factor", panel=STAGES, detail=(
    "zero-shot's one factor for every candidate method, instead of recommend's grid target / trained x 1, 1.5, "
    "2."))]
DatasetOpt = Annotated[Optional[str], shared("--dataset", panel=DATA, detail=(
    "split once into search, finetune and acceptance folders [default: the embedded Shakespeare plays]."))]
SamplesOpt = Annotated[Optional[int], shared("--samples", "-n", panel=RUN, detail=(
    "per task and length in zero-shot and acceptance [default: recommend's 25 and report's 40, cut to the "
    "budget]."))]
TaskOpt = Annotated[Optional[str], opt("--task", "-T", panel=RUN, help=(
    "Tasks of zero-shot and acceptance, comma-separated [default: recommend's five and report's ruler,passkey]."))]
DocsOpt = Annotated[Optional[int], shared("--docs", panel=RUN, detail=(
    "of the PPL sweeps in zero-shot and acceptance, paired across methods and models [default: 8 each]."))]
SeedOpt = Annotated[Optional[int], shared("--seed", panel=RUN, detail="the data split and every stage [default: 0].")]
DryRunOpt = Annotated[bool, shared("--dry-run", panel=RUN, detail="(two timed forwards, no stage).")]
ResumeOpt = Annotated[bool, shared("--resume", panel=RUN, detail="finished stages are reused.")]


@handle_errors
def extend_cmd(
    model: ModelArg, target_length: TargetOpt = "", out: OutOpt = None, budget: BudgetOpt = None,
    max_regression: RegressionOpt = None, search: SearchOpt = "auto", finetune: FinetuneOpt = "auto",
    trials: TrialsOpt = None, steps: StepsOpt = None, factor: FactorOpt = None, dataset: DatasetOpt = None,
    retention_dataset: RetentionOpt = None, serve_with: ServeOpt = None, samples: SamplesOpt = None,
    docs: DocsOpt = None, task: TaskOpt = None, seed: SeedOpt = None, dtype: eo.DtypeOpt = None,
    device: eo.DeviceOpt = None, engine: eo.EngineOpt = None, dry_run: DryRunOpt = False, resume: ResumeOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Extend MODEL to --target-length and prove it: plan, zero-shot, search, fine-tune, ship, accept, card.

    Prints the plan first (two timed forwards; each stage's minutes and memory, fitted to --budget), splits the
    documents once into search, finetune, acceptance and retention folders, chooses by recommend's rule, searches
    and fine-tunes where the best zero-shot candidate is not reached, ships through patch, judges the result with
    report (effective length, retention, verdict) and checks --serve-with engines with verify. Writes OUT/model,
    OUT/EXTENSION.md and OUT/extension.json.
    """
    from ropectl.cli.recommend_cmd import serve_with_engines
    from ropectl.errors import UsageError
    from ropectl.extend.run import run_extend
    from ropectl.extend.spec import ExtendSpec
    from ropectl.runtime.lengths import parse_length

    if not target_length or out is None:
        raise UsageError("extend needs -t and -o", "pass e.g. -t 16k -o extended/")
    given = {k: v for k, v in {"max_regression": max_regression, "samples": samples, "seed": seed, "dtype": dtype,
                                "device": device, "engine": engine, "dataset": dataset, "trials": trials,
                                "steps": steps, "factor": factor, "retention_dataset": retention_dataset, "tasks": task,
                                "docs": docs}.items()
             if v is not None}
    spec = ExtendSpec(model=model, target=parse_length(target_length), out=out, budget_min=budget, search=search,
                      finetune=finetune, serve_with=serve_with_engines(serve_with, model), dry_run=dry_run, resume=resume,
                      **given)
    result = run_extend(spec, lambda line: typer.echo(line, err=True))
    if json_out:
        from ropectl.output import dumps

        typer.echo(dumps(result))
    elif not dry_run:
        typer.echo(f"card: {out}/EXTENSION.md, extension.json")
        typer.echo(f"shipped: {result['shipped']['path']}")
        typer.echo(f"verdict: {result['verdict']['line']}")


def register(app: typer.Typer) -> None:
    app.command("extend")(extend_cmd)
