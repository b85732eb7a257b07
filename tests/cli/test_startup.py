"""Start-up: the CLI's entry module imports no heavy library, and ``--help`` lists each command from its own help.

What a bare ``import ropectl.cli.app`` loads is a property of the code, not of the machine: these tests count
modules, never time, so load cannot make them flaky (bench/bench_startup.py measures the time).
"""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from ropectl.cli.app import COMMANDS, app, load_command

HEAVY = ("torch", "transformers", "numpy", "datasets", "optuna", "peft", "safetensors", "gguf", "matplotlib",
         "accelerate", "rich", "huggingface_hub", "tokenizers")


def _loaded_after(code: str) -> list[str]:
    probe = f"import sys\n{code}\nprint(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    return eval(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout)


def test_importing_the_app_loads_no_heavy_library() -> None:
    assert _loaded_after("import ropectl.cli.app") == []


def test_top_level_help_and_version_load_no_command_module() -> None:
    code = ("from typer.testing import CliRunner\nfrom ropectl.cli.app import app\n"
            "[CliRunner().invoke(app, a) for a in (['--help'], ['--version'], [])]\n"
            "assert not [m for m in sys.modules if m.endswith('_cmd')], sorted(sys.modules)")
    assert _loaded_after(code) == []


def test_the_probe_sees_a_heavy_import() -> None:
    """Negative control: the probe reports what a command's real work imports."""
    assert "numpy" in _loaded_after("import numpy")


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_listed_summary_is_the_commands_own_help(name: str) -> None:
    """The table beside the lazy group repeats each command's first help sentence; it may not drift from it."""
    command = load_command(name)
    assert command.name == name
    assert (command.help or "").split("\n\n")[0].replace("\n", " ").strip() == COMMANDS[name].summary


def test_every_command_module_is_listed() -> None:
    import pkgutil

    import ropectl.cli as cli

    modules = {m.name for m in pkgutil.iter_modules(cli.__path__) if m.name.endswith("_cmd")}
    assert modules == {entry.module for entry in COMMANDS.values()}
    for module in modules:
        assert hasattr(importlib.import_module(f"ropectl.cli.{module}"), "register")


def test_help_lists_every_command_and_an_unknown_one_is_refused_with_a_suggestion() -> None:
    out = CliRunner().invoke(app, ["--help"]).output
    assert all(f"  {name} " in out for name in COMMANDS)
    typo = CliRunner().invoke(app, ["inspct"])
    assert typo.exit_code == 2 and "Did you mean 'inspect'" in typo.output


@pytest.mark.parametrize("args", [["--help"], ["-h"], [], ["--version"]])
def test_the_entry_points_quick_answers_are_clicks_own(args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The entry point answers these without click. The oracle is the Typer app itself answering the same command
    line in a process of its own, as a user's terminal gets it (CliRunner forces another width)."""
    from ropectl.cli.entry import quick_answer

    monkeypatch.delenv("COLUMNS", raising=False)
    code = f"import sys\nsys.argv = ['ropectl', *{args!r}]\nfrom ropectl.cli.app import main\nmain()"
    click_run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    answer = quick_answer("/some/bin/ropectl", args)
    assert answer is not None
    text, to_stderr, exit_code = answer
    assert (text, exit_code) == ((click_run.stderr if to_stderr else click_run.stdout), click_run.returncode)
    assert "Commands:" in text or text.startswith("ropectl ")


@pytest.mark.parametrize(("prog", "args", "columns"), [
    ("ropectl", ["inspect", "--help"], None),  # a command's help is the command's own
    ("ropectl", ["--help", "--version"], None),
    ("/x/ropectl/__main__.py", ["--help"], None),  # python -m ropectl: click names the program its own way
    ("ropectl", ["--help"], "60"),  # a narrow terminal: click wraps the text
])
def test_the_rest_goes_to_click(prog: str, args: list[str], columns: str | None,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    from ropectl.cli.entry import quick_answer

    if columns:
        monkeypatch.setenv("COLUMNS", columns)
    assert quick_answer(prog, args) is None


def test_top_level_help_through_the_entry_point_loads_neither_click_nor_typer() -> None:
    code = ("import sys, io, contextlib\nsys.argv = ['ropectl', '--help']\nfrom ropectl.cli.entry import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n    try:\n        main()\n    except SystemExit:\n"
            "        pass\nprint(sorted(m for m in ('click', 'typer') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
