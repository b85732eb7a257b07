"""The one error handler of the CLI: a single line on stderr, the right exit code, no traceback."""

from __future__ import annotations

import errno
import functools
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from ropectl.errors import OutputError, RopectlError, UsageError
from ropectl.io.signals import ctrl_c_recorded
from ropectl.runtime.interrupt import Interrupted

# What the operating system said, as a problem and a fix: the one place OSError numbers are explained.
OS_ERRORS: dict[int, tuple[str, str]] = {
    errno.ENOSPC: ("no space left on the device", "free disk space or write to another location; nothing "
                   "half-written was kept"),
    errno.EDQUOT: ("disk quota exceeded", "free space within your quota or write to another location"),
    errno.EFBIG: ("file too large for this file system or the file-size limit", "write to another file system "
                  "or raise the limit (ulimit -f)"),
    errno.EACCES: ("permission denied", "choose a location you can read and write, or fix its permissions"),
    errno.EPERM: ("operation not permitted", "choose a location you own, or fix its permissions"),
    errno.EROFS: ("read-only file system", "write to a writable location"),
    errno.ENOTDIR: ("a part of the path is a file, not a folder", "choose a path whose parent folders are folders"),
    errno.EISDIR: ("a folder is in the way of a file", "choose another path"),
    errno.ENAMETOOLONG: ("the file name is too long", "choose a shorter path"),
    errno.EEXIST: ("a file is in the way of a folder", "choose a path whose parent folders are folders, not files"),
    errno.ENOENT: ("no such file or folder", "check the path"),
    errno.EMFILE: ("too many open files", "raise the limit (ulimit -n)"),
}


def os_error(exc: OSError) -> RopectlError:
    """An OSError that reached the CLI as one line: what failed, where, and the fix for its errno."""
    problem, fix = OS_ERRORS.get(exc.errno or 0, (exc.strerror or str(exc) or "an input/output error",
                                                  "check the path, its permissions and the free disk space"))
    if exc.filename and exc.filename2:  # a copy or rename: the second name is the one being written
        where = f" writing '{exc.filename2}' (from '{exc.filename}')"
    else:
        where = f" at '{exc.filename or exc.filename2}'" if exc.filename or exc.filename2 else ""
    return OutputError(f"{problem}{where}", fix)

F = TypeVar("F", bound=Callable[..., Any])


def echo_interrupt(line: str) -> None:
    """An interrupt's one line on stderr, from the start of a line: a terminal has echoed ^C where the cursor
    stood, so there the line is cleared first (it read '^Cinterrupted: ...'); elsewhere it is printed as it is."""
    lead = "\r\x1b[K" if sys.stderr.isatty() and os.environ.get("TERM", "") != "dumb" else ""
    typer.echo(f"{lead}{line}", err=True)


def debug() -> bool:
    return os.environ.get("ROPECTL_DEBUG", "") not in ("", "0", "false")


def _other_rank() -> bool:
    """A process that a launcher (torchrun, accelerate launch) started as a rank other than 0."""
    return os.environ.get("RANK", "0") not in ("", "0")


def handle_errors(func: F) -> F:
    """Wrap a command so every failure ends as one line and an exit code (traceback with ROPECTL_DEBUG=1)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctrl_c: list[int] = []
        try:
            with ctrl_c_recorded(ctrl_c):
                return func(*args, **kwargs)
        except typer.Exit:
            raise
        except Interrupted as exc:  # every command's stop: its one line and the command that resumes (rank 0)
            if not _other_rank():
                echo_interrupt(exc.line())
            raise typer.Exit(exc.exit_code) from None
        except (RopectlError, OSError) as caught:
            if debug():
                raise
            exc = os_error(caught) if isinstance(caught, OSError) else caught
            # under torchrun every rank refuses the same arguments alike: rank 0 says it; what may differ per rank or
            # machine (files, data, devices) each rank says, with its rank
            if not _other_rank():
                typer.echo(f"error: {exc}", err=True)
            elif not isinstance(exc, UsageError):
                typer.echo(f"[rank {os.environ['RANK']}] error: {exc}", err=True)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            if debug():
                raise
            echo_interrupt("interrupted: nothing half-written was kept.")
            raise typer.Exit(130) from None
        except Exception as exc:  # anything unexpected still gets one line, not a traceback
            if debug():
                raise
            if ctrl_c:  # a library turned the user's Ctrl-C into its own error: it is still the interrupt
                echo_interrupt("interrupted: nothing half-written was kept.")
                raise typer.Exit(130) from None
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            rank = f"[rank {os.environ['RANK']}] " if _other_rank() else ""  # may differ per rank: each says it
            typer.echo(
                f"{rank}error: unexpected {type(exc).__name__}: {first}. Fix: rerun with ROPECTL_DEBUG=1 for a "
                "traceback and report it.",
                err=True,
            )
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


def stdout_is_terminal() -> bool:
    return sys.stdout.isatty()


def run_app(app: typer.Typer) -> None:
    """Run the app so that a command line that does not parse also ends as one line and exit code 2.

    Click's own parse errors (unknown flag, missing argument) print a usage block; this catches them
    instead of letting click print them, through click's public exception types (typer is built on click).
    """
    import click

    no_args_help = getattr(click.exceptions, "NoArgsIsHelpError", ())
    try:
        code = app(standalone_mode=False)
    except no_args_help as exc:  # bare `ropectl`: the help is the answer
        exc.show()
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        if debug():
            raise
        ctx = getattr(exc, "ctx", None)
        where = ctx.command_path if ctx is not None else "ropectl"
        typer.echo(f"error: {exc.format_message()} Fix: see '{where} --help'.", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        echo_interrupt("interrupted.")
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
