"""Settings every evaluation task parses the same way: methods, dtypes, the fields trial tasks share. Lengths go
through the one length parser of every command (``ropectl.runtime.lengths``), where runs go is
``ropectl.runtime.folder``'s."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ropectl.errors import UsageError
from ropectl.rope.choice import layer, to_method_spec
from ropectl.rope.methods import MethodSpec

DTYPES = ("auto", "bf16", "fp16", "fp32")


def merge_settings(layers: Sequence[Mapping[str, Any]], flags: Mapping[str, Any], keys: Any,
                   what: str) -> dict[str, Any]:
    """Settings layered lowest first (defaults, preset, ...), then the flags given (None: not given); ``what`` names
    the settings in the error for an unknown key."""
    merged: dict[str, Any] = {}
    for source in (*layers, {k: v for k, v in flags.items() if v is not None}):
        for key, value in source.items():
            key = key.replace("-", "_")
            if key not in keys:
                raise UsageError(f"unknown {what} setting '{key}'", f"use some of: {', '.join(sorted(keys))}")
            merged[key] = value
    return merged


def parse_methods(values: Sequence[str | Mapping[str, Any]] | None) -> tuple[MethodSpec, ...]:
    """Each ``name[:factor][,key=value...]`` (or, in a preset, a ``{method, factor, key = value}`` table)
    through the layering and registry shared with ``patch``."""
    out = []
    for item in values or ():
        choice = layer(preset=item) if isinstance(item, Mapping) else layer(spec=str(item))
        if choice.target_length is not None:
            raise UsageError(f"method {item!r} gives a target length", "eval-ppl methods take a factor, e.g. yarn:4")
        out.append(to_method_spec(choice))
    return tuple(out)


def check_run(dtype: str, batch_tokens: int, methods: Sequence[Any]) -> None:
    """Checks every sweep spec shares: a known dtype, a positive batch and each method once."""
    if dtype not in DTYPES:
        raise UsageError(f"unknown dtype '{dtype}'", f"use one of: {', '.join(DTYPES)}")
    if batch_tokens < 1:
        raise UsageError(f"--batch-tokens must be positive, got {batch_tokens}", "pass e.g. --batch-tokens 8192")
    labels = [m.label for m in methods]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise UsageError(f"method {dupes[0]} is given twice", "pass each --method once")


@dataclass(frozen=True, kw_only=True)
class TrialRunFields:
    """How and where a trial task (passkey, the RULER-style tasks) runs: the fields their specs share."""

    dtype: str = "auto"
    device: str = "auto"
    out: Path | None = None
    resume: bool = False
    force: bool = False
    batch_tokens: int = 8192  # trials of one method and length per forward: batch_tokens // length (>= 1)
    replace_existing: bool = False
    engine: str = "transformers"  # or vllm (ropectl.eval.engines); hf is transformers
    tensor_parallel_size: int = 1  # vLLM only, like the two below
    pipeline_parallel_size: int = 1
    distributed_executor_backend: str | None = None
