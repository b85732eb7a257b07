"""Evaluation tasks and their registry (``register_task``, in the spirit of lm-eval's).

A task says what a cell is, how a batch of cells is scored, how results aggregate and what it writes (tables,
plots, summary). The sweep driver (``ropectl.eval.sweep.run_sweep``) does the rest for every task: output
folder, lock, resume identity, method switching with the frequency check, data parallelism, progress and
Ctrl-C / SIGTERM. See docs/contributing/add-a-task.md.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ropectl.errors import UsageError

if TYPE_CHECKING:
    from ropectl.eval.model import MethodState
    from ropectl.eval.sweep import Sweep

BUILTIN = {"ppl": "ropectl.eval.tasks.ppl", "passkey": "ropectl.eval.tasks.passkey",
           "tasks": "ropectl.eval.tasks.ruler.runner"}


@dataclass
class Batch:
    """One forward's worth of cells: the method whose RoPE runs, the length, and the task's own items."""

    state: MethodState
    length: int
    tokens: int  # for the progress bar's total
    label: str  # what the progress bar names
    items: Any


class SweepSpec(Protocol):
    """Fields of a task's spec that the sweep driver reads (a frozen dataclass per task has them)."""

    model: str | None
    methods: tuple[Any, ...]
    lengths: tuple[int, ...]
    dtype: str
    device: str
    out: Any
    resume: bool
    force: bool
    replace_existing: bool


class Task(Protocol):
    """One evaluation: a fresh instance per run holds that run's task state."""

    name: str  # registry name
    command: str  # names runs/<command>-<timestamp> and the messages
    run_file: str  # the run's identity, for --resume (also what a failed start may leave behind)
    log_file: str  # one line per finished cell, appended as cells finish
    unit: str  # what a logged line is, in messages ("cells", "trials")
    # optional ``verifies_itself = True``: the task checks the RoPE its forwards used itself (tasks: at each prompt's
    # length); otherwise the sweep calls engine.verify_after_forward(state, batch.length) after each batch

    def prepare(self, sweep: Sweep) -> dict[str, Any]:
        """Check every input and build the cells' inputs (tokenizer and methods are ready; no weights yet).
        Returns the run's identity; --resume into a folder of another identity is refused."""

    def write_run_file(self, sweep: Sweep, identity: dict[str, Any]) -> None:
        """Rank 0: check ``identity`` against the folder's run file when resuming, then write it."""

    def done(self, sweep: Sweep) -> set[Any]:
        """Keys of the cells already logged (read only with --resume)."""

    def plan(self, sweep: Sweep, done: set[Any]) -> list[Batch]:
        """This rank's batches, cells in ``done`` left out."""

    def score(self, sweep: Sweep, batch: Batch, on_tokens: Callable[[int], None]) -> list[Any]:
        """Run the batch on ``sweep.engine``; the records to log."""

    def log(self, sweep: Sweep, records: list[Any]) -> None:
        """Append finished records to the log (at once: an interrupted run keeps them)."""

    def kept(self, sweep: Sweep) -> int:
        """How many records the log holds (for the interrupt message)."""

    def finish(self, sweep: Sweep, new: list[Any], wall_s: float) -> Any:
        """Gather, aggregate, write results, summary and plots (rank 0); the result object."""


TaskFactory = Callable[[], Task]
TASKS: dict[str, TaskFactory] = {}
T = TypeVar("T")


def register_task(name: str) -> Callable[[T], T]:
    """Decorator: ``@register_task("toy")`` on a Task class (called with no arguments once per run)."""

    def add(factory: T) -> T:
        TASKS[name] = factory  # type: ignore[assignment]
        return factory

    return add


def get_task(name: str) -> TaskFactory:
    if name not in TASKS and name in BUILTIN:
        importlib.import_module(BUILTIN[name])
    if name not in TASKS:
        raise UsageError(f"unknown task '{name}'", f"use one of: {', '.join(task_names())}")
    return TASKS[name]


def task_names() -> list[str]:
    return sorted({*TASKS, *BUILTIN})
