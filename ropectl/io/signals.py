"""Signals: SIGTERM unwinds like Ctrl-C, so staged output is cleaned up and runs exit 143 (SIGINT 130)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator


@contextlib.contextmanager
def sigterm_as_interrupt(raising: type[BaseException] = KeyboardInterrupt) -> Iterator[None]:
    """Let SIGTERM unwind like Ctrl-C (raising ``raising``) so staged output is cleaned up."""

    def raise_interrupt(signum: int, frame: object) -> None:
        raise raising

    try:
        previous = signal.signal(signal.SIGTERM, raise_interrupt)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
