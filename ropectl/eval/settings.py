"""Settings every evaluation task parses the same way: lengths, methods, dtypes, where runs go.

``32k`` in eval-ppl is ``32k`` in eval-passkey, recommend and patch: one parser.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ropectl.errors import UsageError
from ropectl.rope.choice import layer, to_method_spec
from ropectl.rope.methods import MethodSpec

DTYPES = ("auto", "bf16", "fp16", "fp32")
DEFAULT_OUT_ROOT = Path("runs")


# A decimal number, an optional exponent, an optional k/K (x 1024) or m/M (x 1024^2); spaces around are fine.
_LENGTH = re.compile(r"^\s*(\d+(?:\.\d+)?(?:[eE]\+?\d+)?)\s*([kKmM]?)\s*$")
LENGTH_SYNTAX = "8192, 8k or 8K (k = 1024), 1e5, 48.5k (= 49664); a whole number of tokens"
_LENGTH_FIX = "write a whole number of tokens: 8192, 8k or 8K (k = 1024, m = 1024^2), 1e5, 48.5k (= 49664)"


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


def parse_length(text: str | int | float, minimum: int = 1) -> int:
    """THE length parser of every command's length flags: ``4096``, ``4k``/``4K`` (= 4096), ``1e5`` (= 100000),
    ``1m`` (= 1048576), ``48.5k`` (= 49664). A value that is not a whole number of tokens (``1.3k`` = 1331.2) is
    refused, never rounded: a rounded length would run another experiment than the one asked for."""
    value = _length_value(text)
    if value is None or not math.isfinite(value) or value != int(value) or value < 1:
        raise UsageError(f"length '{text}' is not a positive whole number of tokens", _LENGTH_FIX)
    if value < minimum:
        raise UsageError(f"length '{text}' is below the minimum of {minimum} tokens", _LENGTH_FIX)
    return int(value)


def _length_value(text: str | int | float) -> float | None:
    if isinstance(text, bool):
        return None
    if isinstance(text, (int, float)):
        return float(text)
    match = _LENGTH.match(str(text))
    if not match:
        return None
    return float(match.group(1)) * {"": 1, "k": 1024, "m": 1024**2}[match.group(2).lower()]


def parse_lengths(values: str | list[Any] | tuple[Any, ...]) -> tuple[int, ...]:
    """Comma-separated or listed lengths (each through :func:`parse_length`, 2 tokens or more), sorted and
    deduplicated."""
    items = str(values).split(",") if isinstance(values, str) else [
        part for v in values for part in (str(v).split(",") if isinstance(v, str) else [v])
    ]
    items = [i for i in items if str(i).strip()]
    if not items:
        raise UsageError("no lengths given", "write lengths like 2k,4k,8192")
    # a sweep length scores predictions, which needs a token before the one scored
    return tuple(sorted({parse_length(i, minimum=2) for i in items}))


def parse_token_counts(merged: dict[str, Any], keys: Sequence[str]) -> None:
    """The other token-count settings (stride, batch tokens, ...) through the one parser, in place: 8k is 8192
    there too."""
    for key in keys:
        if merged.get(key) is not None:
            merged[key] = parse_length(merged[key])


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


def length_label(n: int) -> str:
    return f"{n // 1024}k" if n % 1024 == 0 else (f"{n / 1024:.1f}k" if n >= 1024 else str(n))


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
