"""The Typer app. Command modules are thin and import the core lazily, so ``--help`` stays instant."""

from __future__ import annotations

import typer

from ropectl import __version__

app = typer.Typer(
    name="ropectl",
    help="Inspect, patch, convert and evaluate RoPE scaling of Hugging Face checkpoints.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"ropectl {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
) -> None:
    """ropectl: make RoPE models read longer contexts, the same way in every engine."""


def _register() -> None:
    for name in ("inspect_cmd", "patch_cmd", "layout_cmd", "ppl_cmd"):
        try:
            module = __import__(f"ropectl.cli.{name}", fromlist=["register"])
        except ModuleNotFoundError as exc:
            if exc.name != f"ropectl.cli.{name}":
                raise
            continue
        module.register(app)


_register()


def main() -> None:
    app()
