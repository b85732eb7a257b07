"""``ropectl inspect``: a short summary of a checkpoint's RoPE."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ropectl.cli.errors import handle_errors
from ropectl.cli.flags import JsonOpt, ModelArg, SeqLenOpt
from ropectl.output import dumps, plain

PlotOpt = Annotated[Optional[Path], typer.Option("--plot", help="Write a PNG of wavelength per dimension pair.")]
EnginesOpt = Annotated[bool, typer.Option(
    "--engines", help="Show what each reader (transformers version ranges, vLLM, SGLang, llama.cpp, lm-eval) computes "
                      "from this checkpoint, what it does with its attention features (NoPE layers, chunked "
                      "attention, query temperature, Dual Chunk Attention), and each disagreement with its fix.")]


@handle_errors
def inspect(model: ModelArg, json_out: JsonOpt = False, plot: PlotOpt = None, seq_len: SeqLenOpt = None,
            engines: EnginesOpt = False) -> None:
    """Explain a checkpoint's RoPE: frequencies, wavelengths against the trained context, layout."""
    from ropectl.inspection import InspectSpec, inspect_model
    from ropectl.runtime.lengths import parse_length

    length = None if seq_len is None else parse_length(seq_len)
    report = inspect_model(InspectSpec(model=model, seq_len=length, plot=plot, engines=engines))
    if json_out:
        typer.echo(dumps(report.to_dict(), indent=2))
        return
    from ropectl.cli.render import print_inspect

    print_inspect(report.to_dict())
    if engines:
        print_engines(report.to_dict()["engines"])


def print_engines(views: list[dict[str, Any]]) -> None:
    """One block per reader: its RoPE per layer type, serving length, and how it differs (with the fix)."""
    from ropectl.readers.parity import merge_runs

    typer.echo("\nper reader:")
    for view in merge_runs(views):
        mark = "same" if view["agrees"] else "DIFFERS"
        typer.echo(f"  {view['reader']}: {mark}")
        for layer, rope in view["layers"].items():
            where = "" if layer == "main" else f"{layer}: "
            typer.echo(f"    {where}{rope['rope_type']} theta {plain(rope['rope_theta'])}, factor {plain(rope['factor'])}, "
                       f"original {plain(rope['original'])}, {rope['frequencies']} frequencies "
                       f"{plain(rope['inv_freq_max'])} .. {plain(rope['inv_freq_min'])}, "
                       f"attention {plain(rope['attention_factor'])}")
        for note in view.get("attention", ()):
            typer.echo(f"    attention: {note}")
        length = view["serving_length"]
        typer.echo(f"    serving length: {plain(length) if length else view['serving_rule'] or '-'}")
        if view["differs"]:
            typer.echo(f"    differs: {view['differs']}")
        if view["fix"]:
            typer.echo(f"    fix: {view['fix']}")


def register(app: typer.Typer) -> None:
    app.command("inspect")(inspect)
