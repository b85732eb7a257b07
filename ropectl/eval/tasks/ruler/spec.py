"""What an ``eval-tasks`` run is asked to do: one frozen spec from defaults and flags (shared flags parse as in
eval-ppl)."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from ropectl.errors import UsageError
from ropectl.eval.settings import TrialRunFields, check_run, merge_settings, parse_methods
from ropectl.rope.methods import MethodSpec, unscaled_name
from ropectl.runtime.lengths import parse_lengths, parse_token_counts

# RULER's effective length: the longest length whose mean score stays above Llama-2-7B's at 4k (85.6 %).
RULER_THRESHOLD = 0.856
# The embedded default (SmolLM2-135M, trained at 8k): three tasks across and past the trained context.
TASKS_DEFAULTS: dict[str, Any] = {"tasks": "niah_single_1,niah_multikey_2,vt", "methods": [unscaled_name(), "yarn:2"],
                                  "lengths": ["2k", "8k", "12k"], "samples": 8}
GENERIC: dict[str, Any] = {"tasks": "ruler", "lengths": ["4k", "8k", "16k"], "samples": 25}


@dataclass(frozen=True, kw_only=True)
class TasksSpec(TrialRunFields):
    """Long-context tasks: tasks x methods x lengths x samples, paired across methods."""

    model: str | None = None
    tasks: tuple[str, ...] = ("niah_single_1",)
    methods: tuple[MethodSpec, ...] = ()
    lengths: tuple[int, ...] = (4096,)
    samples: int = 1
    seed: int = 0
    threshold: float = RULER_THRESHOLD
    dataset: str | None = None  # the haystack text (essay tasks and word lists): the eval corpus

    def __post_init__(self) -> None:
        from ropectl.eval.engines import check_engine_options

        check_engine_options(self.engine, self.tensor_parallel_size, self.pipeline_parallel_size,
                             self.distributed_executor_backend)
        if self.samples < 1:
            raise UsageError(f"--samples must be at least 1, got {self.samples}", "pass --samples 1 or more")
        if not 0.0 < self.threshold <= 1.0:
            raise UsageError(f"--threshold must be in (0, 1], got {self.threshold}", "pass e.g. --threshold 0.856")
        check_run(self.dtype, self.batch_tokens, self.methods)

    def with_(self, **changes: Any) -> TasksSpec:
        return replace(self, **changes)


_KEYS = {f.name for f in fields(TasksSpec)}


def build_tasks_spec(preset: dict[str, Any] | None = None, **flags: Any) -> TasksSpec:
    """Defaults (embedded model: the demo's; a MODEL: RULER's 11 generated tasks), then ``preset``, then flags."""
    from ropectl.eval.tasks.ruler import resolve_tasks

    layers = [TASKS_DEFAULTS if flags.get("model") is None else GENERIC, dict(preset or {})]
    merged = merge_settings(layers, flags, _KEYS, "eval-tasks")
    merged["tasks"] = resolve_tasks(merged["tasks"])
    merged["methods"] = parse_methods(merged.get("methods"))
    merged["lengths"] = parse_lengths(merged["lengths"])
    parse_token_counts(merged, ("batch_tokens",))
    if merged.get("out") is not None:
        merged["out"] = Path(merged["out"]).expanduser()
    return TasksSpec(**merged)
