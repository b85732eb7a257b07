"""``ropectl eval-tasks``: RULER-style long-context tasks over lengths x RoPE methods, weights loaded once."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from ropectl.cli import eval_flags as eo
from ropectl.cli.errors import handle_errors
from ropectl.cli.flags import ForceOpt, JsonOpt, shared

OutOpt = eo.out_option("eval-tasks")

opt, RUN, DATA = eo.opt, eo.RUN, eo.DATA
TaskOpt = Annotated[Optional[str], opt("--task", "-T", panel=RUN, help=(
    "Comma-separated tasks or groups: ruler (all 11 generated RULER tasks), niah, niah_single, niah_multikey, "
    "niah_single_1..3, niah_multikey_1..3, niah_multivalue, niah_multiquery, vt, cwe, fwe, passkey "
    "[default: niah_single_1,niah_multikey_2,vt; with a MODEL: ruler]."))]
SamplesOpt = Annotated[Optional[int], shared("--samples", "-n", panel=RUN, detail=(
    "per task x length, the same for every method [default: 8; with a MODEL: 25]."))]
SeedOpt = Annotated[Optional[int], shared("--seed", panel=RUN, detail="the generated trials [default: 0].")]
ThresholdOpt = Annotated[Optional[float], opt("--threshold", panel=RUN, help=(
    "Effective length: the longest length whose mean score stays at or above this [default: 0.856, RULER's]."))]
DatasetOpt = Annotated[Optional[str], shared("--dataset", panel=DATA, detail=(
    "haystack text for the essay tasks and word lists, a .txt/.md/.jsonl/.parquet file or folder "
    "[default: the embedded Shakespeare plays]."))]
BatchOpt = Annotated[Optional[str], shared("--batch-tokens", panel=RUN, detail=(
    "trials of one length share a forward, batch-tokens // length at a time [default: 8192; 8k works]."))]


@handle_errors
def eval_tasks(
    model: eo.ModelOpt = None, task: TaskOpt = None, method: eo.MethodOpt = None, lengths: eo.LengthsOpt = None,
    samples: SamplesOpt = None, seed: SeedOpt = None, threshold: ThresholdOpt = None, dataset: DatasetOpt = None,
    dtype: eo.DtypeOpt = None, device: eo.DeviceOpt = None, out: OutOpt = None, resume: eo.ResumeOpt = False,
    force: ForceOpt = False, json_out: JsonOpt = False, batch_tokens: BatchOpt = None,
    replace_existing: eo.ReplaceOpt = False, engine: eo.EngineOpt = None,
    tensor_parallel_size: eo.TensorParallelOpt = None, pipeline_parallel_size: eo.PipelineParallelOpt = None,
    distributed_executor_backend: eo.ExecutorOpt = None,
) -> None:
    """RULER-style tasks (needle retrieval, variable tracking, common/frequent words, passkey) over lengths x
    RoPE methods, with 95 % intervals, paired differences against none and each method's effective length.

    Generated offline from the eval corpus; the same trials for every method. Scored as RULER: greedy decoding
    after its answer prefix, string_match_all. With no arguments: SmolLM2-135M, none vs yarn:2.
    """
    from ropectl.eval.tasks.ruler.runner import run_tasks
    from ropectl.eval.tasks.ruler.spec import build_tasks_spec

    spec = build_tasks_spec(model=model, tasks=task, methods=method or None, lengths=lengths, samples=samples,
                            seed=seed, threshold=threshold, dataset=dataset, dtype=dtype, device=device, out=out,
                            resume=resume or None, force=force or None, batch_tokens=batch_tokens,
                            replace_existing=replace_existing or None, engine=engine,
                            tensor_parallel_size=tensor_parallel_size, pipeline_parallel_size=pipeline_parallel_size,
                            distributed_executor_backend=distributed_executor_backend)
    result = eo.run_sweep_command(lambda on_progress: run_tasks(spec, on_progress), "trials")
    if result is not None:
        eo.echo_result(result, json_out, print_tasks_table)


def print_tasks_table(result: Any) -> None:
    """Mean score [95 % interval] per task x method (rows) and length (columns); then effective lengths."""
    from rich.console import Console


    meta = result.meta
    trained = meta.get("trained_context")
    table = eo.sweep_table(meta, "long-context tasks", meta["dtype"], f"{meta['samples']} trials per cell")
    table.add_column("task")
    for n in meta["lengths"]:
        table.add_column(eo.length_header(n, trained), justify="right")
    tasks = [*meta["tasks"], *(["average"] if len(meta["tasks"]) > 1 else [])]
    for task in tasks:
        for i, method in enumerate(meta["methods"]):
            cells = [result.score(task, method, n) for n in meta["lengths"]]
            table.add_row(method, task, *[_cell(c) for c in cells], end_section=i == len(meta["methods"]) - 1)
    eo.print_sweep_table(table, trained, meta["lengths"], "Score: RULER string_match_all on greedy output; "
                         "[95 % Wilson interval over trials].",
                         f"results: {result.out}/tasks.json, tasks.csv, tasks-summary.json, tasks.png "
                         f"({meta['wall_s']:.0f} s, dtype {meta['dtype']}: {meta['dtype_choice']})")
    parts = [f"{m} {_effective(n, result.decided.get(m, {}), min(meta['lengths']))}"
             for m, n in result.effective.items()]
    Console().print(f"effective length (95 % Wilson lower bound ≥ {meta['threshold']:.1%} at every length up to it): "
                    f"{', '.join(parts)}", soft_wrap=True)


def _effective(n: int | None, decided: dict[str, Any], shortest: int) -> str:
    """A method's effective length in words; where the intervals cannot tell, what would decide it."""
    from ropectl.runtime.lengths import length_label

    if decided.get("determined", True):
        return length_label(n) if n else f"< {length_label(shortest)}"
    need = decided.get("samples_to_decide")
    known = f"at least {length_label(n)}; " if n else ""
    return f"not determined ({known}" + (f"about {need} trials per cell would decide it)" if need else
                                         "no trial count decides it)")


def _cell(s: Any) -> str:
    return "-" if s is None else f"{s.mean:.0%} [{s.lo:.0%}, {s.hi:.0%}]"


def register(app: typer.Typer) -> None:
    app.command("eval-tasks")(eval_tasks)
