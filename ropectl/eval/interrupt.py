"""Interrupts of a sweep: Ctrl-C and SIGTERM keep finished cells and say how to resume.

SIGTERM (what schedulers and ``kill`` send) is unwound like Ctrl-C, so the finished cells stay logged, the
lock is released, and the user gets the resume command instead of a silent death.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from ropectl.errors import RopectlError

# Test hook: block after this many logged cells until a signal arrives, so an interrupt lands at a known point.
PAUSE_ENV = "ROPECTL_TEST_PAUSE_AFTER_CELLS"


class SweepInterrupted(RopectlError):
    """Ctrl-C or SIGTERM: finished cells are on disk; exit 130 (143 for SIGTERM) like any shell command."""

    exit_code = 130

    def __init__(self, out: Path, kept: int, terminated: bool = False, log: str = "results.jsonl") -> None:
        self.out, self.kept, self.terminated = out, kept, terminated
        self.exit_code = 143 if terminated else 130
        super().__init__(f"{'terminated' if terminated else 'interrupted'}; {kept} finished cells are kept in "
                         f"{out / log}", f"rerun the same command with --resume --out {out}")

    @property
    def what(self) -> str:
        """How the CLI names the interrupt: terminated (SIGTERM) or interrupted (Ctrl-C)."""
        return "terminated" if self.terminated else "interrupted"


class Terminated(KeyboardInterrupt):
    """SIGTERM, unwound like Ctrl-C so finished cells are kept and the lock released."""


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
