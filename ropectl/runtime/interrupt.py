"""How every command stops on Ctrl-C and SIGTERM: what it finished is kept, and one line says how to resume.

SIGTERM (what schedulers and ``kill`` send) is unwound like Ctrl-C, so the finished work stays on disk, the lock is
released, and the user gets the resume command instead of a silent death. Every command's stop is an
:class:`Interrupted` (exit 130, 143 for SIGTERM) carrying its resume line, built by :func:`resume_line` alone.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from ropectl.errors import RopectlError

# Test hook: block after this many logged cells until a signal arrives, so an interrupt lands at a known point.
PAUSE_ENV = "ROPECTL_TEST_PAUSE_AFTER_CELLS"
_OUT_FLAGS = ("--out", "-o", "--output")


def resume_line(out: Path | None = None, *, extra: Sequence[str] = (), launcher: Sequence[str] = ("ropectl",),
                argv: Sequence[str] | None = None) -> str:
    """This command line again (``argv``, by default the process's own) under ``launcher``, with ``extra`` flags,
    ``--resume`` (once, where the user already wrote it) and, unless it names one, ``--out OUT``."""
    args = [*(sys.argv if argv is None else argv)[1:], *extra]
    if "--resume" not in args:
        args.append("--resume")
    if out is not None and not any(a in _OUT_FLAGS or a.startswith(("--out=", "--output=")) for a in args):
        args += ["--out", str(out)]
    return shlex.join([*launcher, *args])


class Interrupted(RopectlError):
    """Ctrl-C or SIGTERM stopped a run whose finished work is kept: exit 130 (143 for SIGTERM).

    ``stopped`` is what the one printed line says before ``; resume with:``, ``resume`` the command that continues
    (:func:`resume_line`)."""

    exit_code = 130

    def __init__(self, problem: str, fix: str | None, *, terminated: bool, resume: str,
                 stopped: str | None = None) -> None:
        self.terminated, self.resume = terminated, resume
        self.exit_code = 143 if terminated else 130
        super().__init__(problem, fix)
        self.stopped = stopped or self.problem

    @property
    def what(self) -> str:
        """How the CLI names the interrupt: terminated (SIGTERM) or interrupted (Ctrl-C)."""
        return "terminated" if self.terminated else "interrupted"

    def line(self) -> str:
        """The one line the CLI prints."""
        return f"{self.stopped}; resume with: {self.resume}"

    def retold(self, stopped: str, resume: str | None = None) -> Interrupted:
        """The same stop in the words of the command that ran it (a sweep of recommend's resumes recommend)."""
        self.stopped = stopped
        self.resume = self.resume if resume is None else resume
        return self


class SweepInterrupted(Interrupted):
    """A sweep stopped: its finished cells are logged in ``out``, and ``--resume --out OUT`` skips them."""

    def __init__(self, out: Path, kept: int, terminated: bool = False, log: str = "results.jsonl") -> None:
        self.out, self.kept = out, kept
        super().__init__(f"{'terminated' if terminated else 'interrupted'}; {kept} finished cells are kept in "
                         f"{out / log}", f"rerun the same command with --resume --out {out}", terminated=terminated,
                         resume=resume_line(out))


class Terminated(KeyboardInterrupt):
    """SIGTERM, unwound like Ctrl-C so finished cells are kept and the lock released."""


def terminated(exc: BaseException) -> bool:
    """Whether an unwound interrupt was SIGTERM (under :func:`sigterm_as_interrupt`) rather than Ctrl-C."""
    return isinstance(exc, Terminated)


def sigterm_as_interrupt() -> contextlib.AbstractContextManager[None]:
    from ropectl.io.signals import sigterm_as_interrupt as unwind

    return unwind(Terminated)


_logged = [0]


def pause_for_tests(new: int) -> None:
    """With ROPECTL_TEST_PAUSE_AFTER_CELLS=N, wait for a signal once N cells are logged (tests only)."""
    _logged[0] += new
    limit = os.environ.get(PAUSE_ENV)
    if limit and _logged[0] >= int(limit):
        while True:
            # Not signal.pause(): a signal that lands after the last check for pending signals and before the
            # pause() call would be handled only at the next one, so the test would wait for ever under load.
            # A short sleep returns to the interpreter, which raises the pending KeyboardInterrupt at once.
            time.sleep(0.05)
