"""The contract between a task and the sweep driver, in one file: the ``Task`` hooks, the ``Batch`` a plan is made
of, the fields of a spec the driver reads, and the ``Sweep`` (one run's shared state) every hook is handed.
The driver is ``ropectl.eval.tasks.sweep``; the registry ``ropectl.eval.tasks``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ropectl.eval.engines import Engine
    from ropectl.runtime.dist import World
    from ropectl.runtime.lock import OutLock
    from ropectl.runtime.model import MethodState, ModelSource


@dataclass
class Sweep:
    """One run's shared state, handed to every task hook."""

    spec: Any
    world: World
    out: Path
    device: str = "cpu"
    dtype: str = "fp32"
    dtype_choice: str = ""
    source: ModelSource | None = None
    states: list[MethodState] = field(default_factory=list)
    trained: int | None = None
    engine: Engine | None = None
    lock: OutLock | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def model_label(self) -> str:
        assert self.source is not None
        return self.source.label


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
