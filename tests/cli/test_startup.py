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
