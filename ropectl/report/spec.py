"""What ``report`` is asked to compare, and the fixed numbers of its rules (each with its source)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ropectl.errors import UsageError
from ropectl.limits import check_budget, check_max_regression, check_paired_docs

# NoLiMa (Modarressi et al. 2025): a length counts while the model keeps at least 85 % of its short-context score.
THRESHOLD = 0.85
# A task enters the relative rule only where the base does it: Wilson lower bound >= 0.5 at the reference length
# (a ratio to a score near 0 is undefined, docs/reference/report.md).
KEEP = 0.5
CONFIDENCE = 0.95
DEFAULT_MAX_REGRESSION = 0.01  # LongRoPE2 reports > 98.5 % retention; 1 % is the default allowance
DEFAULT_SAMPLES = 40  # per task and length: 22 is the fewest at which a perfect score can count (K / (K + z^2))
REFERENCE_MIN_SAMPLES = 10  # the reference cell is every ratio's denominator, and 4 is the fewest that can keep a task
DEFAULT_DOCS = 8
CANDIDATES = "ruler,passkey"  # RULER's generated tasks and passkey; the base's reference score keeps some
RETENTION_DEFAULT = "python-docs"


@dataclass(frozen=True, kw_only=True)
class ReportSpec:
    base: str
    extended: str
    target: int
    out: Path | None = None
    lengths: tuple[int, ...] = ()  # empty: default_lengths (the trained context, 1.5x, 2x, 4x, ... the target)
    samples: int | None = None  # per task and length; None: DEFAULT_SAMPLES, cut to --budget
    docs: int = DEFAULT_DOCS
    tasks: str = CANDIDATES
    dataset: str | None = None  # the haystack of the task trials (the eval corpus)
    retention_dataset: str = RETENTION_DEFAULT
    max_regression: float = DEFAULT_MAX_REGRESSION
    budget_min: float | None = None
    dtype: str = "auto"
    device: str = "auto"
    engine: str | None = None
    seed: int = 0
    resume: bool = False  # continue the card folder's sweeps, skipping the trials and cells they logged

    def __post_init__(self) -> None:
        if self.samples is not None and self.samples < 1:
            raise UsageError(f"--samples must be at least 1, got {self.samples}", "pass e.g. --samples 40")
        check_paired_docs(self.docs)
        check_max_regression(self.max_regression)
        check_budget(self.budget_min)
        if self.lengths and min(self.lengths) < 2:
            raise UsageError("--lengths must be 2 tokens or more", "pass e.g. --lengths 8k,12k")

    @property
    def max_samples(self) -> int:
        return self.samples or DEFAULT_SAMPLES


def default_lengths(trained: int, target: int) -> tuple[int, ...]:
    """The trained context, 1.5x and 2x of it, then doubling (RULER's grid: 4x, 8x, ...) below the target, then the
    target: the half steps find where a barely extended model falls off, and doubling keeps a 16x target at six
    lengths instead of thirty-one."""
    out, n = [trained], trained * 3 // 2
    while n < target:
        out.append(n)
        n = trained * 2 if n < trained * 2 else n * 2
    return tuple(sorted({*out, target}))


def reference_length(trained: int) -> int:
    """A quarter of the trained context: short enough that every extension leaves it alone, long enough for RULER's
    prompts."""
    return max(2, trained // 4)
