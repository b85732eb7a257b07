"""Lengths, the one syntax of every command's length flags: ``32k`` in eval-ppl is ``32k`` in eval-passkey,
recommend, patch, finetune and search."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from ropectl.errors import UsageError

# A decimal number, an optional exponent, an optional k/K (x 1024) or m/M (x 1024^2); spaces around are fine.
_LENGTH = re.compile(r"^\s*(\d+(?:\.\d+)?(?:[eE]\+?\d+)?)\s*([kKmM]?)\s*$")
LENGTH_SYNTAX = "8192, 8k or 8K (k = 1024), 1e5, 48.5k (= 49664); a whole number of tokens"
_LENGTH_FIX = "write a whole number of tokens: 8192, 8k or 8K (k = 1024, m = 1024^2), 1e5, 48.5k (= 49664)"


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


def length_label(n: int) -> str:
    return f"{n // 1024}k" if n % 1024 == 0 else (f"{n / 1024:.1f}k" if n >= 1024 else str(n))
