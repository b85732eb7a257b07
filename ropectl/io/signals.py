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


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM inside the block: one that arrives meanwhile is raised again as it ends, to the
    handlers there were before (which raise KeyboardInterrupt, ask a run to stop, or terminate).

    For steps that must not be cut halfway: a rich progress bar starting or stopping (cut between marking itself
    started and installing its render hook, its stop then fails with "pop from empty list", and that error, not
    the interrupt, is what the user saw). Masking the signal would not do: Python may have taken it already and
    raise it at its next instruction. Outside the main thread the block runs as it is.
    """
    caught: list[int] = []

    def hold(signum: int, frame: object) -> None:
        caught.append(signum)

    try:
        previous = {s: signal.signal(s, hold) for s in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread: signals stay as they are
        yield
        return
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for s in dict.fromkeys(caught):
            signal.raise_signal(s)
