"""Strict JSON out: every file and --json line ropectl writes is standard JSON, never NaN or Infinity."""

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
