"""Evaluation tasks and their registry (``register_task``, in the spirit of lm-eval's).

A task says what a cell is, how a batch of cells is scored, how results aggregate and what it writes (tables,
plots, summary). The sweep driver (``ropectl.eval.tasks.sweep.run_sweep``) does the rest for every task: output
folder, lock, resume identity, method switching with the frequency check, data parallelism, progress and
Ctrl-C / SIGTERM. The contract (``Task``, ``Batch``, the ``Sweep`` every hook gets) is ``contract``; tasks score
through the sweep engine's three calls (``ropectl.eval.engines.requests``). See docs/contributing/add-a-task.md.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TypeVar

from ropectl.errors import UsageError
from ropectl.eval.tasks.contract import Batch, Sweep, SweepSpec, Task

BUILTIN = {"ppl": "ropectl.eval.tasks.ppl", "passkey": "ropectl.eval.tasks.passkey",
           "tasks": "ropectl.eval.tasks.ruler.runner"}


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


__all__ = ["BUILTIN", "TASKS", "Batch", "Sweep", "SweepSpec", "Task", "get_task", "register_task", "task_names"]
