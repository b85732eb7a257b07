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
    # Plain help rendering: rich's help formatter costs ~150 ms of start-up on every --help.
    rich_markup_mode=None,
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
    # Command modules import only typer at load time; the core is imported when a command runs.
    from ropectl.cli import finetune_cmd, inspect_cmd, layout_cmd, passkey_cmd, patch_cmd, ppl_cmd, recommend_cmd, tasks_cmd

    for module in (inspect_cmd, patch_cmd, layout_cmd, ppl_cmd, passkey_cmd, tasks_cmd, recommend_cmd, finetune_cmd):
        module.register(app)


_register()


def main() -> None:
    from ropectl.cli.errors import run_app

    run_app(app)
