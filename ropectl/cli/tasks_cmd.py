"""``ropectl eval-tasks``: RULER-style long-context tasks over lengths x RoPE methods, weights loaded once."""

from __future__ import annotations

import json
from typing import Annotated, Any, Optional

import typer

from ropectl.cli.errors import handle_errors
from ropectl.cli.eval_options import (
    DATA,
    RUN,
    DeviceOpt,
    DtypeOpt,
    LengthsOpt,
    MethodOpt,
    ModelOpt,
    OutOpt,
    ReplaceOpt,
    ResumeOpt,
    opt,
    run_sweep_command,
)
from ropectl.cli.options import ForceOpt, JsonOpt

TaskOpt = Annotated[Optional[str], opt("--task", "-T", panel=RUN, help=(
    "Comma-separated tasks or groups: ruler (all 11 generated RULER tasks), niah, niah_single, niah_multikey, "
    "niah_single_1..3, niah_multikey_1..3, niah_multivalue, niah_multiquery, vt, cwe, fwe, passkey "
    "[default: niah_single_1,niah_multikey_2,vt; with a MODEL: ruler]."))]
SamplesOpt = Annotated[Optional[int], opt("--samples", "-n", panel=RUN, help=(
    "Trials per task x length, the same for every method [default: 8; with a MODEL: 25]."))]
SeedOpt = Annotated[Optional[int], opt("--seed", panel=RUN, help="Seed of the generated trials [default: 0].")]
ThresholdOpt = Annotated[Optional[float], opt("--threshold", panel=RUN, help=(
    "Effective length: the longest length whose mean score stays at or above this [default: 0.856, RULER's]."))]
DatasetOpt = Annotated[Optional[str], opt("--dataset", panel=DATA, help=(
    "Haystack text for the essay tasks and word lists: a .txt/.md/.jsonl/.parquet file or folder "
    "[default: the embedded Shakespeare plays]."))]
BatchOpt = Annotated[Optional[int], opt("--batch-tokens", panel=RUN, help=(
    "Trials of one length share a forward, batch-tokens // length at a time [default: 8192]."))]


@handle_errors
def eval_tasks(
    model: ModelOpt = None, task: TaskOpt = None, method: MethodOpt = None, lengths: LengthsOpt = None,
    samples: SamplesOpt = None, seed: SeedOpt = None, threshold: ThresholdOpt = None, dataset: DatasetOpt = None,
    dtype: DtypeOpt = None, device: DeviceOpt = None, out: OutOpt = None, resume: ResumeOpt = False,
    force: ForceOpt = False, json_out: JsonOpt = False, batch_tokens: BatchOpt = None,
    replace_existing: ReplaceOpt = False,
) -> None:
    """RULER-style tasks (needle retrieval, variable tracking, common/frequent words, passkey) over lengths x
    RoPE methods, with 95 % intervals, paired differences against none and each method's effective length.

    Generated offline from the eval corpus; the same trials for every method. Scored by teacher forcing with
    RULER's answer prefix, one forward per trial batch. With no arguments: SmolLM2-135M, none vs yarn:2.
    """
    from ropectl.eval.tasks.ruler.runner import run_tasks
    from ropectl.eval.tasks.ruler.spec import build_tasks_spec

    spec = build_tasks_spec(model=model, tasks=task, methods=method or None, lengths=lengths, samples=samples,
                            seed=seed, threshold=threshold, dataset=dataset, dtype=dtype, device=device, out=out,
                            resume=resume or None, force=force or None, batch_tokens=batch_tokens,
                            replace_existing=replace_existing or None)
    result = run_sweep_command(lambda on_progress: run_tasks(spec, on_progress), "trials")
    if result is None:
        return
    if json_out:
        typer.echo(json.dumps(result.to_dict()))
        return
    print_tasks_table(result)


def print_tasks_table(result: Any) -> None:
    """Mean score [95 % interval] per task x method (rows) and length (columns); then effective lengths."""
    from rich.console import Console
    from rich.table import Table

    from ropectl.eval.options import length_label

    meta = result.meta
    trained = meta.get("trained_context")
    table = Table(title=f"long-context tasks · {meta['model']} · {meta['dtype']} · {meta['samples']} trials per cell")
    table.add_column("task", style="bold")
    table.add_column("method")
    for n in meta["lengths"]:
        table.add_column(length_label(n) + (" *" if trained and n > trained else ""), justify="right")
    tasks = [*meta["tasks"], *(["average"] if len(meta["tasks"]) > 1 else [])]
    for task in tasks:
        for i, method in enumerate(meta["methods"]):
            cells = [result.score(task, method, n) for n in meta["lengths"]]
            table.add_row(task if i == 0 else "", method, *[_cell(c) for c in cells],
                          end_section=i == len(meta["methods"]) - 1)
    console = Console()
    console.print(table)
    if trained:
        console.print(f"* beyond the trained context ({trained} tokens). Score: RULER string match under greedy "
                      "decoding, by teacher forcing; [95 % interval over trials].")
    eff = ", ".join(f"{m} {length_label(n) if n else '< ' + length_label(min(meta['lengths']))}"
                    for m, n in result.effective.items())
    console.print(f"effective length (mean score ≥ {meta['threshold']:.1%} at every length up to it): {eff}",
                  soft_wrap=True)
    console.print(f"results: {result.out}/tasks.json, tasks.csv, tasks-summary.json, tasks.png "
                  f"({meta['wall_s']:.0f} s, dtype {meta['dtype']}: {meta['dtype_choice']})", soft_wrap=True)


def _cell(s: Any) -> str:
    return "-" if s is None else f"{s.mean:.0%} [{s.lo:.0%}, {s.hi:.0%}]"


def register(app: typer.Typer) -> None:
    app.command("eval-tasks")(eval_tasks)
