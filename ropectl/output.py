"""Output in one place: strict JSON (every file and --json line ropectl writes is standard JSON, never NaN or
Infinity) and how numbers are shown in tables, summaries and printed commands."""

from __future__ import annotations

import json
from typing import Any

from ropectl.errors import VerificationError


def dumps(obj: Any, **kwargs: Any) -> str:
    """json.dumps with allow_nan=False; a non-finite number is a bug or a bad input, never written out."""
    try:
        return json.dumps(obj, allow_nan=False, **kwargs)
    except ValueError as exc:
        raise VerificationError(f"a value to write is not a finite number ({exc})",
                                "check the inputs for values out of range; nothing was written") from None


def number(value: Any, digits: int = 6, grouping: bool = True) -> str:
    """A value for people: "-" for None, floats to ``digits`` significant digits, thousands grouped when asked."""
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    sep = "," if grouping else ""
    return f"{value:{sep}.{digits}g}" if isinstance(value, float) else f"{value:{sep}}"


def plain(value: Any) -> str:
    """``number`` without thousands grouping: for values inside a sentence or a spec (``yarn:4,original=8192``)."""
    return number(value, grouping=False)


def exact(value: float) -> str:
    """A number for a command line or a spec: enough digits to round-trip (10 significant)."""
    return f"{value:.10g}"


def count(n: int, noun: str) -> str:
    """``1 process``, ``2 processes``, ``3 documents``: English plurals of the nouns ropectl counts."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}es" if noun.endswith("s") else f"{n} {noun}s"
