"""The one error handler of the CLI: a single line on stderr, the right exit code, no traceback."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from ropectl.errors import RopectlError

F = TypeVar("F", bound=Callable[..., Any])


def debug() -> bool:
    return os.environ.get("ROPECTL_DEBUG", "") not in ("", "0", "false")


def handle_errors(func: F) -> F:
    """Wrap a command so every failure ends as one line and an exit code (traceback with ROPECTL_DEBUG=1)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except typer.Exit:
            raise
        except RopectlError as exc:
            if debug():
                raise
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            if debug():
                raise
            typer.echo("interrupted: nothing half-written was kept.", err=True)
            raise typer.Exit(130) from None
        except Exception as exc:  # anything unexpected still gets one line, not a traceback
            if debug():
                raise
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            typer.echo(
                f"error: unexpected {type(exc).__name__}: {first}. Fix: rerun with ROPECTL_DEBUG=1 for a "
                "traceback and report it.",
                err=True,
            )
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


def stdout_is_terminal() -> bool:
    return sys.stdout.isatty()
