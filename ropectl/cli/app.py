"""The Typer app. Each command's module is imported only when that command runs (or shows its own help); the core
is imported lazily inside each command. ``ropectl``, ``--help`` and ``--version`` alone never get here: the entry
point (cli/entry.py) answers them without click or typer."""

from __future__ import annotations

import importlib
from difflib import get_close_matches
from typing import Any

import click
import typer
from typer.core import TyperGroup

from ropectl import __version__
from ropectl.cli.commands import COMMANDS, HELP, VERSION_HELP


def load_command(name: str) -> click.Command:
    """The click command of ``name``, built from its module's ``register`` on an app of its own."""
    single = typer.Typer(**SETTINGS)
    importlib.import_module(f"ropectl.cli.{COMMANDS[name].module}").register(single)
    return typer.main.get_command(single)


class LazyGroup(TyperGroup):
    """A group that lists its commands from ``COMMANDS`` and imports a command's module only to run it."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        if name not in self.commands:
            self.commands[name] = load_command(name)
        return self.commands[name]

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        limit = formatter.width - 6 - max(len(n) for n in COMMANDS)
        rows = [(name, click.Command(name, help=entry.summary).get_short_help_str(limit))
                for name, entry in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return click.Group.resolve_command(self, ctx, args)
        except click.UsageError as e:
            matches = get_close_matches(args[0], list(COMMANDS)) if args else []
            if matches:
                e.message = f"{e.message.rstrip('.')}. Did you mean {', '.join(repr(m) for m in matches)}?"
            raise


SETTINGS: dict[str, Any] = dict(
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain help rendering: rich's help formatter costs ~150 ms of start-up on every --help.
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)

app = typer.Typer(name="ropectl", cls=LazyGroup,
                  help=HELP, **SETTINGS)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"ropectl {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help=VERSION_HELP),
) -> None:
    """ropectl: make RoPE models read longer contexts, the same way in every engine."""


def main() -> None:
    from ropectl.cli.errors import run_app

    run_app(app)
