"""``ropectl eval-passkey``: passkey retrieval over lengths x depths x RoPE methods, weights loaded once."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from ropectl.cli import eval_flags as eo
from ropectl.cli.errors import handle_errors
from ropectl.cli.flags import ForceOpt, JsonOpt, shared

OutOpt = eo.out_option("eval-passkey")

DepthsOpt = Annotated[Optional[str], eo.opt("--depths", panel=eo.RUN, help=(
    "Comma-separated depths of the key in the filler, 0 (start) to 1 (end) [default: 0.1,0.5,0.9]."))]
SamplesOpt = Annotated[Optional[int], shared("--samples", "-n", panel=eo.RUN, detail=(
    "random keys per method x length x depth, as eval-tasks' --samples [default: 1]."))]
OldTrialsOpt = Annotated[Optional[str], eo.opt("--trials", panel=eo.RUN, hidden=True)]  # the old spelling
SeedOpt = Annotated[Optional[int], shared("--seed", panel=eo.RUN, detail="the keys [default: 0].")]
DigitsOpt = Annotated[Optional[int], eo.opt("--key-digits", panel=eo.RUN, help="Digits of the key [default: 5].")]
BatchOpt = Annotated[Optional[str], shared("--batch-tokens", panel=eo.RUN, detail=(
    "trials of one method and length share a forward, batch-tokens // length at a time [default: 8192; 8k works]."))]


@handle_errors
def eval_passkey(
    model: eo.ModelOpt = None, method: eo.MethodOpt = None, lengths: eo.LengthsOpt = None, depths: DepthsOpt = None,
    samples: SamplesOpt = None, old_trials: OldTrialsOpt = None, seed: SeedOpt = None, key_digits: DigitsOpt = None,
    dtype: eo.DtypeOpt = None,
    device: eo.DeviceOpt = None, out: OutOpt = None, resume: eo.ResumeOpt = False, force: ForceOpt = False,
    json_out: JsonOpt = False, batch_tokens: BatchOpt = None, replace_existing: eo.ReplaceOpt = False,
    engine: eo.EngineOpt = None, tensor_parallel_size: eo.TensorParallelOpt = None,
    pipeline_parallel_size: eo.PipelineParallelOpt = None, distributed_executor_backend: eo.ExecutorOpt = None,
) -> None:
    """Passkey retrieval (YaRN / LongLoRA prompt) over lengths x depths x RoPE methods, in one run.

    Scored by teacher forcing in one forward per batch: a trial succeeds when greedy decoding would
    produce the key. With no arguments: SmolLM2-135M, none vs dynamic:2 at 2k/8k/12k (trained at 8k).
    """
    from ropectl.errors import UsageError
    from ropectl.eval.tasks.passkey import build_passkey_spec, run_passkey

    if old_trials is not None:  # --trials is search's count of Optuna trials: one name, one meaning
        raise UsageError("eval-passkey's --trials is now --samples (-n), as in eval-tasks", f"pass --samples {old_trials}")

    spec = build_passkey_spec(model=model, methods=method or None, lengths=lengths, depths=depths, trials=samples,
                              seed=seed, key_digits=key_digits, dtype=dtype, device=device, out=out,
                              resume=resume or None, force=force or None, batch_tokens=batch_tokens,
                              replace_existing=replace_existing or None, engine=engine,
                              tensor_parallel_size=tensor_parallel_size, pipeline_parallel_size=pipeline_parallel_size,
                              distributed_executor_backend=distributed_executor_backend)
    result = eo.run_sweep_command(lambda on_progress: run_passkey(spec, on_progress), "trials")
    if result is not None:
        eo.echo_result(result, json_out, print_passkey_table)


def print_passkey_table(result: Any) -> None:
    """Accuracy per method x depth (rows) and length (columns), then every depth pooled."""
    meta = result.meta
    trained = meta.get("trained_context")
    table = eo.sweep_table(meta, "passkey retrieval", meta["dtype"], f"{meta['trials']} trial(s) per cell")
    table.add_column("depth", justify="right")
    for n in meta["lengths"]:
        table.add_column(eo.length_header(n, trained), justify="right")
    cells = {(a.method, a.length, a.depth): a for a in (*result.table, *result.by_length)}
    for method in meta["methods"]:
        for depth in [*meta["depths"], None]:
            row = [cell_text(cells.get((method, n, depth))) for n in meta["lengths"]]
            table.add_row(method if depth == meta["depths"][0] else "", "all" if depth is None else f"{depth:g}", *row,
                          end_section=depth is None)
    eo.print_sweep_table(
        table, trained, meta["lengths"], "Success: greedy decoding would give the key.",
        f"results: {result.out}/passkey.json, passkey.csv, passkey-summary.json, passkey.png "
        f"({meta['wall_s']:.0f} s, dtype {meta['dtype']}: {meta['dtype_choice']})")


def cell_text(a: Any) -> str:
    return "-" if a is None else f"{a.accuracy:.0%} ({a.correct}/{a.trials})"


def register(app: typer.Typer) -> None:
    app.command("eval-passkey")(eval_passkey)
