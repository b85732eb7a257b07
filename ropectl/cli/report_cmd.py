"""``ropectl report``: the evidence card of an extended checkpoint against its base."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ropectl.cli import eval_flags as eo
from ropectl.cli.errors import handle_errors
from ropectl.cli.flags import JsonOpt, max_regression_opt, shared

opt, RUN, DATA, RULE = eo.opt, eo.RUN, eo.DATA, "Rule"
BaseArg = Annotated[str, typer.Argument(help="The checkpoint before the extension (folder, .gguf or hub id).",
                                        show_default=False)]
ExtendedArg = Annotated[str, typer.Argument(help="The extended checkpoint (same tokenizer).", show_default=False)]
TargetOpt = Annotated[str, shared("--target-length", panel=RULE, detail="the context claimed.")]
OutOpt = Annotated[Optional[Path], opt("--out", "-o", panel=eo.OUT, help=(
    "Card folder: EXTENSION.md, extension.json, plots, and the sweeps under base/ and extended/ "
    "[default: runs/report-<timestamp>]."))]
LengthsOpt = Annotated[Optional[str], opt("--lengths", "-l", panel=RUN, help=(
    "Comma-separated lengths to judge [default: the trained context, 1.5x, 2x, then 4x, 8x, ... below the "
    "target, and the target]."))]
SamplesOpt = Annotated[Optional[int], shared("--samples", "-n", panel=RUN, detail=(
    "per task x length, the same trials for both models [default: 40, cut to --budget]."))]
DocsOpt = Annotated[Optional[int], shared("--docs", panel=RUN, detail=(
    "retention documents, paired across the models [default: 8]."))]
TaskOpt = Annotated[Optional[str], opt("--task", "-T", panel=RUN, help=(
    "Candidate tasks (the base's reference score keeps some) [default: ruler,passkey]."))]
DatasetOpt = Annotated[Optional[str], shared("--dataset", panel=DATA, detail=(
    "haystack text of the task trials, a .txt/.md/.jsonl/.parquet file or folder [default: the embedded "
    "Shakespeare plays]."))]
RetentionOpt = Annotated[Optional[str], opt("--retention-dataset", panel=DATA, help=(
    "Text the in-window PPL ratio is read on, never the fine-tune data [default: python-docs, the Python "
    "Language Reference that CPython ships]."))]
RegressionOpt = Annotated[Optional[float], max_regression_opt(
    0.01, ": retained when the paired ratio's upper bound is at most 1 + this")]
BudgetOpt = Annotated[Optional[float], shared("--budget", panel=RULE, detail=(
    "fewer samples per length until the estimate from two timed forwards fits; refused when one sample per "
    "length does not."))]
ResumeOpt = Annotated[bool, shared("--resume", panel=eo.OUT, detail=(
    "the sweeps' logged trials and cells in --out (the newest runs/report-* without it)."))]
SeedOpt = Annotated[Optional[int], shared("--seed", panel=RUN, detail="the generated trials [default: 0].")]


@handle_errors
def report_cmd(
    base: BaseArg, extended: ExtendedArg, target_length: TargetOpt = "", out: OutOpt = None,
    lengths: LengthsOpt = None, samples: SamplesOpt = None, docs: DocsOpt = None, task: TaskOpt = None,
    dataset: DatasetOpt = None, retention_dataset: RetentionOpt = None, max_regression: RegressionOpt = None,
    budget: BudgetOpt = None, seed: SeedOpt = None, dtype: eo.DtypeOpt = None, device: eo.DeviceOpt = None,
    engine: eo.EngineOpt = None, resume: ResumeOpt = False, json_out: JsonOpt = False,
) -> None:
    """Judge EXTENDED against BASE at --target-length: effective length, retention, one verdict.

    Effective length: the longest length whose score ratio to the base's reference score (tasks the base does at
    a quarter of its trained context) has a 95 % lower bound >= 0.85 there and at every shorter length (NoLiMa's
    rule). Retention: the paired in-window PPL ratio on text that is not the fine-tune data. Prints a plan with
    minutes first, then the verdict (reached, not reached, not determined) and writes EXTENSION.md,
    extension.json and plots to --out.
    """
    from ropectl.errors import UsageError
    from ropectl.report import spec as rs
    from ropectl.report.run import run_report
    from ropectl.runtime.lengths import parse_length, parse_lengths

    if not target_length:
        raise UsageError("--target-length is required", "pass the context EXTENDED claims, e.g. -t 16k")
    given = {k: v for k, v in {"samples": samples, "docs": docs, "tasks": task, "dataset": dataset,
                                "retention_dataset": retention_dataset, "max_regression": max_regression,
                                "budget_min": budget, "seed": seed, "dtype": dtype, "device": device,
                                "engine": engine}.items() if v is not None}
    spec = rs.ReportSpec(base=base, extended=extended, target=parse_length(target_length), out=out,
                         lengths=parse_lengths(lengths) if lengths else (), resume=resume, **given)
    with eo.progress_bar(enabled=not json_out) as on_progress:
        card = run_report(spec, lambda line: typer.echo(line, err=True), on_progress)
    if json_out:
        from ropectl.output import dumps
        from ropectl.report.card import finite

        typer.echo(dumps(finite(card.to_dict())))
        return
    print_card(card)


def print_card(card: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    from ropectl.runtime.lengths import length_label as label

    d = card.data
    eff = d["effective_length"]
    table = Table(title=f"effective length · {', '.join(d['tasks']['kept']) or 'no task kept'} · "
                        f"{d['samples']} per length")
    for col in ("length", "extended", "base", "ratio [95 %]", "status"):
        table.add_column(col, justify="left" if col in ("length", "status") else "right")
    for r in eff.get("by_length", []):
        ext, base = r["extended"], r["base"]
        hi = "∞" if r["hi"] is None else f"{r['hi']:.3f}"
        table.add_row(label(r["length"]), f"{ext['mean']:.0%} (n={ext['n']})",
                      "-" if base is None else f"{base['mean']:.0%}", f"{r['ratio']:.3f} [{r['lo']:.3f}, {hi}]",
                      r["status"] or "")
    console = Console()
    console.print(table)
    for row in d["retention"]["ppl"]:
        hi = "∞" if row["hi"] is None else f"{row['hi']:.4f}"
        console.print(f"retention @ {label(row['length'])}: PPL {row['base_ppl']:.3f} -> {row['extended_ppl']:.3f}, "
                      f"ratio {row['ratio']:.4f} [{row['lo']:.4f}, {hi}] on {row['docs']} documents", soft_wrap=True,
                      markup=False)
    console.print(f"card: {card.out}/EXTENSION.md, extension.json", soft_wrap=True, markup=False)
    typer.echo(f"verdict: {card.verdict.line}")


def register(app: typer.Typer) -> None:
    app.command("report")(report_cmd)
