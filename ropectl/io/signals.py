"""Signals: SIGTERM unwinds like Ctrl-C, so staged output is cleaned up and runs exit 143 (SIGINT 130)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def handled(signums: tuple[int, ...], handler: Callable[[int, object], None]) -> Iterator[bool]:
    """``handler`` for ``signums`` inside the block, the previous handlers put back after it. Yields False (and
    changes nothing) outside the main thread, where Python refuses to set handlers."""
    try:
        previous = {s: signal.signal(s, handler) for s in signums}
    except ValueError:  # not the main thread: leave signals alone
        yield False
        return
    try:
        yield True
    finally:
        for s, old in previous.items():
            signal.signal(s, old)


@contextlib.contextmanager
def sigterm_as_interrupt(raising: type[BaseException] = KeyboardInterrupt) -> Iterator[None]:
    """Let SIGTERM unwind like Ctrl-C (raising ``raising``) so staged output is cleaned up."""

    def raise_interrupt(signum: int, frame: object) -> None:
        raise raising

    with handled((signal.SIGTERM,), raise_interrupt):
        yield


@contextlib.contextmanager
def ctrl_c_recorded(seen: list[int]) -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt as ever, and is also recorded in ``seen``: a library may catch it and raise
    another error (a Ctrl-C inside transformers' lazy imports surfaces as "Could not import module 'LlamaConfig'"),
    and the CLI must still tell the user's Ctrl-C from an unexpected error."""

    def record(signum: int, frame: object) -> None:
        seen.append(signum)
        raise KeyboardInterrupt

    with handled((signal.SIGINT,), record):
        yield


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
        with handled((signal.SIGINT, signal.SIGTERM), hold):
            yield
    finally:
        for s in dict.fromkeys(caught):  # the handlers from before are back: each takes its signal as it would have
            signal.raise_signal(s)
