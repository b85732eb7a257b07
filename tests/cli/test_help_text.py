"""Help text says what the commands do: no markup escapes leak, each command names its own default folder, and
--dry-run says what happens with --emit. The oracle is the literal text a user should read."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from ropectl.cli.app import app

runner = CliRunner()


def help_text(command: str) -> str:
    result = runner.invoke(app, [command, "--help"], terminal_width=400, max_content_width=400)
    assert result.exit_code == 0, result.output
    return " ".join(result.stdout.split())


def test_patch_help_shows_the_table_name_without_an_escape() -> None:
    text = help_text("patch")
    assert "A TOML file with a [patch] table." in text and "\\[" not in text


def test_patch_help_says_dry_run_is_refused_with_emit() -> None:
    assert "Only with --emit config: with --emit vllm / sglang / llama.cpp (which write nothing anyway) it is refused." \
        in help_text("patch")


@pytest.mark.parametrize("command", ["eval-ppl", "eval-passkey", "eval-tasks"])
def test_each_sweep_names_its_own_default_folder(command: str) -> None:
    text = help_text(command)
    assert f"[default: runs/{command}-<timestamp>]" in text
    others = {"eval-ppl", "eval-passkey", "eval-tasks"} - {command}
    assert not any(f"runs/{o}-<timestamp>" in text for o in others)  # eval-tasks once named eval-ppl's
