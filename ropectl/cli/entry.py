"""The console entry point. ``ropectl``, ``ropectl --help`` and ``ropectl --version`` are answered here from the
command table, before click and typer are imported: those two cost about 60 ms of a 130 ms start on a 2-core EPYC,
for text that never changes. Every other command line goes to the Typer app (cli/app.py).

The text is click's own rendering, byte for byte (tests/cli/test_startup.py compares them). Where click would render
it differently (a terminal narrower than 80 columns, COLUMNS set), the app renders it."""

from __future__ import annotations

import os
import sys

from ropectl import __version__
from ropectl.cli.commands import COMMANDS, HELP, VERSION_HELP

WIDTH = 78  # click's help width: min(terminal columns, 80) - 2
HELP_OPTIONS = ("-h", "--help")
OPTIONS = (("--version", VERSION_HELP), ("-h, --help", "Show this message and exit."))


def _columns() -> int:
    """The terminal's columns as click's formatter reads them (shutil.get_terminal_size, without importing it)."""
    try:
        return int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        pass
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or 80  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        return 80


def short_help(text: str, limit: int) -> str:
    """A command's line in the table: its first sentence, shortened at a word to ``limit`` with '...'."""
    words = text.split()
    for i, word in enumerate(words):  # a period ends the sentence unless a lowercase word follows (e.g. "vs.")
        if word.endswith(".") and (i == len(words) - 1 or not words[i + 1][0].islower()):
            words = words[: i + 1]
            break
    line = " ".join(words)
    if len(line) <= limit:
        return line
    import textwrap

    return textwrap.shorten(line, limit, placeholder="...", break_on_hyphens=False)


def _rows(rows: list[tuple[str, str]]) -> list[str]:
    first = max(len(name) for name, _ in rows)
    return [f"  {name:<{first}}  {text}".rstrip() for name, text in rows]


def root_help() -> str:
    """``ropectl --help`` as click renders it at 80 columns."""
    import textwrap

    limit = WIDTH - 6 - max(len(n) for n in COMMANDS)
    lines = ["Usage: ropectl [OPTIONS] COMMAND [ARGS]...", "",
             textwrap.fill(HELP, WIDTH, initial_indent="  ", subsequent_indent="  "), "", "Options:",
             *_rows(list(OPTIONS)), "", "Commands:",
             *_rows([(name, short_help(entry.summary, limit)) for name, entry in COMMANDS.items()])]
    return "\n".join(lines) + "\n"


def quick_answer(prog: str, args: list[str]) -> tuple[str, bool, int] | None:
    """(text, to stderr, exit code) for the command lines answered without click, or None for the rest (and for
    ``python -m ropectl``, whose usage line click spells its own way)."""
    if os.path.basename(prog) != "ropectl":
        return None
    if args == ["--version"]:
        return f"ropectl {__version__}\n", False, 0
    if (args == [] or (len(args) == 1 and args[0] in HELP_OPTIONS)) and min(_columns(), 80) - 2 == WIDTH:
        return root_help(), not args, 2 if not args else 0  # no arguments: help on stderr, exit 2, as click does
    return None


def main() -> None:
    answer = quick_answer(sys.argv[0], sys.argv[1:])
    if answer is None:
        from ropectl.cli.app import main as app_main

        app_main()
        return
    text, to_stderr, code = answer
    (sys.stderr if to_stderr else sys.stdout).write(text)
    sys.exit(code)
