"""``ropectl inspect``: a short summary of a checkpoint's RoPE."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ropectl.cli.errors import handle_errors
from ropectl.cli.options import JsonOpt, ModelArg, SeqLenOpt
from ropectl.jsonio import dumps

PlotOpt = Annotated[Optional[Path], typer.Option("--plot", help="Write a PNG of wavelength per dimension pair.")]


@handle_errors
def inspect(model: ModelArg, json_out: JsonOpt = False, plot: PlotOpt = None, seq_len: SeqLenOpt = None) -> None:
    """Explain a checkpoint's RoPE: frequencies, wavelengths against the trained context, layout."""
    from ropectl.inspection import InspectSpec, inspect_model

    report = inspect_model(InspectSpec(model=model, seq_len=seq_len, plot=plot))
    if json_out:
        typer.echo(dumps(report.to_dict(), indent=2))
        return
    from ropectl.cli.render import print_inspect

    print_inspect(report.to_dict())


def register(app: typer.Typer) -> None:
    app.command("inspect")(inspect)
