"""``ropectl convert-layout``: interleaved ⇄ half-split q/k weights, streaming and exact."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Optional

import typer

from ropectl.cli.errors import handle_errors
from ropectl.cli.flags import ForceOpt, JsonOpt, ModelArg, OutputOpt
from ropectl.cli.render import print_warning
from ropectl.output import dumps

ToOpt = Annotated[str, typer.Option("--to", help="Target q/k layout: interleaved or half-split.", show_default=False)]
FromOpt = Annotated[
    Optional[str],
    typer.Option("--from", help="Source layout, when the format does not tell (e.g. Meta weights in an HF folder)."),
]
VerifyOpt = Annotated[
    bool, typer.Option("--verify", help="Check numerically on the real weights that both layouts give the same RoPE."),
]

DurableOpt = Annotated[
    bool, typer.Option("--fsync/--no-fsync", help="Flush the output to disk before renaming it into place, so "
                       "that not even a power loss can leave truncated shards (slower). Interrupts are safe "
                       "either way."),
]


@handle_errors
def convert_layout(model: ModelArg, to: ToOpt, output: OutputOpt = None, from_layout: FromOpt = None,
                   verify: VerifyOpt = False, force: ForceOpt = False, durable: DurableOpt = False,
                   json_out: JsonOpt = False) -> None:
    """Permute q/k projection rows between the interleaved (2i, 2i+1) and half-split (i, i+d/2) RoPE layouts."""
    from ropectl.layout.convert import ConvertSpec
    from ropectl.layout.convert import convert_layout as run

    spec = ConvertSpec(model=model, to=to, output=output, from_layout=from_layout, verify=verify, force=force,
                       durable=durable)
    with _progress(enabled=not json_out) as progress:
        result = run(spec, progress=progress)
    if json_out:
        typer.echo(dumps(result.to_dict(), indent=2))
        return
    _print_result(result.to_dict())


class _progress:
    """A rich progress bar by bytes on stderr, only on a terminal (core only sees a plain callback)."""

    def __init__(self, enabled: bool) -> None:
        from rich.console import Console

        self.console = Console(stderr=True)
        self.enabled = enabled and self.console.is_terminal
        self.bar: Any = None

    def __enter__(self) -> Callable[[int, int], None] | None:
        if not self.enabled:
            return None
        from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

        self.bar = Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                            TransferSpeedColumn(), TimeRemainingColumn(), console=self.console, transient=True)
        self.bar.start()
        task = self.bar.add_task("converting", total=None)
        return lambda done, total: self.bar.update(task, completed=done, total=total)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


def _print_result(d: dict[str, Any]) -> None:
    from rich.console import Console

    console = Console()
    rotary = f"{d['rotary_dim']} of head_dim {d['head_dim']}"
    console.print(f"[bold]{d['from']} → {d['to']}[/bold]  {d['source']} → [green]{d['output']}[/green]")
    heads = f"{d['num_attention_heads']} query / {d['num_key_value_heads']} key-value heads"
    console.print(f"  {d['model_type']}: {heads}, rotary dims {rotary}  [dim](source layout: {d['from_reason']})[/dim]")
    mib = d["bytes"] / 2**20
    speed = mib / d["seconds"] if d["seconds"] else 0.0
    console.print(f"  permuted {d['tensors_permuted']} of {d['tensors_total']} tensors in {len(d['weight_files'])} "
                  f"{d['input_format']} file(s); {mib:,.1f} MiB written in {d['seconds']:.2f} s ({speed:,.1f} MiB/s)")
    if d["skipped"]:
        console.print(f"  [dim]not copied: {', '.join(d['skipped'])}[/dim]")
    if d["verify"]:
        v = d["verify"]
        layers = ", ".join(str(x) for x in v["layers"]) or "-"
        console.print(f"  [green]verified[/green] on layers {layers} ({v['heads_checked']} heads in all), "
                      f"{len(v['positions'])} positions: max error {v['max_abs_error']:.3g} "
                      f"(relative {v['max_rel_error']:.3g}, attention scores {v['score_max_rel_error']:.3g})")
    for warning in d["warnings"]:
        print_warning(console, warning)


def register(app: typer.Typer) -> None:
    app.command("convert-layout")(convert_layout)
