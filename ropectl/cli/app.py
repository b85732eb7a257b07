"""The Typer app. Each command's module is imported only when that command runs (or shows its own help), so
``ropectl --help`` imports typer and this file alone; the core is imported lazily inside each command."""

from __future__ import annotations

import importlib
from difflib import get_close_matches
from typing import Any, NamedTuple

import click
import typer
from typer.core import TyperGroup

from ropectl import __version__


class Entry(NamedTuple):
    module: str  # ropectl.cli.<module>, whose register(app) adds the command
    summary: str  # the first sentence of the command's docstring (tests/cli/test_startup.py checks it)


# The commands in the order ``--help`` lists them.
COMMANDS: dict[str, Entry] = {
    "inspect": Entry("inspect_cmd", "Explain a checkpoint's RoPE: frequencies, wavelengths against the trained "
                                    "context, layout."),
    "patch": Entry("patch_cmd", "Rewrite a checkpoint's RoPE scaling (config.json or GGUF metadata), verified "
                                "against transformers."),
    "convert-layout": Entry("layout_cmd", "Permute q/k projection rows between the interleaved (2i, 2i+1) and "
                                          "half-split (i, i+d/2) RoPE layouts."),
    "eval-ppl": Entry("ppl_cmd", "Perplexity of a model over lengths x RoPE scaling methods, in one run (weights "
                                 "loaded once)."),
    "eval-passkey": Entry("passkey_cmd", "Passkey retrieval (YaRN / LongLoRA prompt) over lengths x depths x RoPE "
                                         "methods, in one run."),
    "eval-tasks": Entry("tasks_cmd", "RULER-style tasks (needle retrieval, variable tracking, common/frequent words, "
                                     "passkey) over lengths x RoPE methods, with 95 % intervals, paired differences "
                                     "against none and each method's effective length."),
    "recommend": Entry("recommend_cmd", "Rank RoPE methods and factors for --target-length, and say how sure: paired "
                                        "task scores and PPL."),
    "report": Entry("report_cmd", "Judge EXTENDED against BASE at --target-length: effective length, retention, one "
                                  "verdict."),
    "finetune": Entry("finetune_cmd", "Patch MODEL's RoPE exactly as `ropectl patch` does, fine-tune it (PoSE by "
                                      "default) and write a checkpoint."),
    "search": Entry("search_cmd", "Search a method's parameters on the model itself (Optuna; LongRoPE's evolution for "
                                  "--space longrope)."),
}


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
                  help="Inspect, patch, convert and evaluate RoPE scaling of Hugging Face checkpoints.", **SETTINGS)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"ropectl {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
) -> None:
    """ropectl: make RoPE models read longer contexts, the same way in every engine."""


def main() -> None:
    from ropectl.cli.errors import run_app

    run_app(app)
