"""What one ``ropectl extend`` is asked to do, and the fixed numbers of its stage rules (each with why).

The rules (docs/reference/extend.md says more):
- zero-shot *reached* (recommend's winner, before any search or training): its mean task score at the target has a
  95 % Wilson lower bound >= report's THRESHOLD (0.85) and its in-window regression is within --max-regression. A
  score ratio to any base reference score <= 1 is at least the score itself, so this is a sufficient (conservative)
  form of report's rule that needs no base sweep; acceptance still judges the shipped model with report's full rule.
- ``--search auto``: search when zero-shot is not reached and the budget's search share holds >= MIN_TRIALS trials.
  A search's first trial is its space's defaults (the closed form itself), so fewer than 2 trials try nothing new.
- ``--finetune auto``: fine-tune (PoSE, finetune's defaults) when zero-shot is not reached and the budget's
  fine-tune share holds >= MIN_STEPS optimizer steps (fewer are within the warm-up: the learning rate never peaks).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ropectl.errors import UsageError
from ropectl.limits import check_budget, check_max_regression, check_paired_docs

CHOICES = ("auto", "never", "always")
MIN_TRIALS = 2
MIN_STEPS = 20
DEFAULT_TRIALS = 12  # with no --budget: a study that can move off the closed form a few times
DEFAULT_MAX_REGRESSION = 0.01  # report's: acceptance judges retention at this
SEARCH_DOCS, SEARCH_HELD_OUT = 2, 2  # search's documents and its held-out ones, from the search split
FINETUNE_HELD_OUT = 1
# The budget's shares when every stage runs (a stage that does not run gives its share to acceptance, whose samples
# decide what the card can say): zero-shot and acceptance are the evidence, search and finetune the work.
SHARES = {"zero-shot": 0.15, "search": 0.2, "finetune": 0.35, "acceptance": 0.3}


@dataclass(frozen=True, kw_only=True)
class ExtendSpec:
    model: str
    target: int
    out: Path
    budget_min: float | None = None
    max_regression: float = DEFAULT_MAX_REGRESSION
    search: str = "auto"
    finetune: str = "auto"
    dataset: str | None = None
    retention_dataset: str | None = None  # None: report's default (python-docs)
    serve_with: tuple[str, ...] = ()
    samples: int | None = None  # zero-shot and acceptance: per task and length (None: their defaults, cut to the budget)
    docs: int | None = None  # zero-shot's and acceptance's PPL documents (None: their defaults)
    tasks: str | None = None  # zero-shot's and acceptance's tasks (None: recommend's and report's defaults)
    trials: int | None = None  # search trials (None: from the budget)
    steps: int | None = None  # fine-tune steps (None: from the budget)
    factor: float | None = None  # zero-shot: one factor per method instead of recommend's grid
    space: str | None = None  # search space (None: search's default)
    seed: int = 0
    dtype: str = "auto"
    device: str = "auto"
    engine: str | None = None  # acceptance's evaluation engine (report's --engine)
    dry_run: bool = False
    resume: bool = False

    def __post_init__(self) -> None:
        for flag, value in (("--search", self.search), ("--finetune", self.finetune)):
            if value not in CHOICES:
                raise UsageError(f"{flag} {value} is not one of {', '.join(CHOICES)}", f"pass {flag} auto")
        check_budget(self.budget_min)
        check_max_regression(self.max_regression)
        check_paired_docs(self.docs)
        if self.factor is not None and not self.factor > 1:
            raise UsageError(f"--factor must be more than 1, got {self.factor}", "pass e.g. --factor 2")
        for flag, value in (("--samples", self.samples), ("--trials", self.trials), ("--steps", self.steps)):
            if value is not None and value < 1:
                raise UsageError(f"{flag} must be at least 1, got {value}", f"pass a positive {flag}")


def zero_shot_sizes(spec: ExtendSpec) -> dict[str, Any]:
    """recommend's generic sizes, with --samples trials per task and --task's tasks where given (both evidence
    stages take them)."""
    return {k: v for k, v in {"samples": spec.samples, "tasks": spec.tasks, "docs": spec.docs}.items() if v is not None}
