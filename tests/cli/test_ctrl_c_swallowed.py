"""A Ctrl-C that a library catches and turns into its own error is still the user's interrupt: the interrupt line
and exit 130, not "unexpected error". transformers' lazy imports do this: a Ctrl-C while a model class imports
surfaced as "ModuleNotFoundError: Could not import module 'LlamaConfig'"."""

from __future__ import annotations

import signal

import pytest
import typer
from typer.testing import CliRunner

from ropectl.cli.errors import handle_errors


def _app(swallow_ctrl_c: bool) -> typer.Typer:
    app = typer.Typer()

    @app.command()
    @handle_errors
    def load() -> None:
        try:
            if swallow_ctrl_c:
                signal.raise_signal(signal.SIGINT)  # the user's Ctrl-C, delivered where the library runs
            raise KeyboardInterrupt  # control: the same error path without a Ctrl-C reaching the process
        except KeyboardInterrupt:
            raise ModuleNotFoundError("Could not import module 'LlamaConfig'") from None

    return app


def test_a_swallowed_ctrl_c_is_the_interrupt_line() -> None:
    result = CliRunner().invoke(_app(True), [])
    assert result.exit_code == 130, result.output
    assert result.stderr.strip() == "interrupted: nothing half-written was kept."


def test_the_same_error_without_ctrl_c_stays_unexpected() -> None:
    """Negative control: only a Ctrl-C the process received makes the error an interrupt."""
    result = CliRunner().invoke(_app(False), [])
    assert result.exit_code == 1 and "unexpected ModuleNotFoundError" in result.stderr, result.output


@pytest.mark.parametrize("swallow", [True, False])
def test_the_handler_puts_back_the_one_before(swallow: bool) -> None:
    before = signal.getsignal(signal.SIGINT)
    CliRunner().invoke(_app(swallow), [])
    assert signal.getsignal(signal.SIGINT) is before
