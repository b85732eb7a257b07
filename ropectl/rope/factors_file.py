"""A method's list options read from a JSON file (longrope's ``short_factor`` / ``long_factor``): the one reader
behind ``-m longrope:4,file=factors.json`` in every command and ``patch --longrope-file``."""

from __future__ import annotations

import json
from pathlib import Path

from ropectl.errors import UsageError


def read_factors_file(path: Path, keys: tuple[str, ...]) -> dict[str, list[float]]:
    """The ``keys`` lists of a JSON file: ``{"short_factor": [...], "long_factor": [...]}``, or a config.json whose
    ``rope_scaling`` / ``rope_parameters`` section holds them."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read longrope file '{path}' ({exc.strerror})", "check the path") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"longrope file '{path}' is not valid JSON ({exc})", "fix the JSON") from None
    if isinstance(data, dict):
        data = data.get("rope_scaling") or data.get("rope_parameters") or data
    if not isinstance(data, dict) or not all(isinstance(data.get(k), list) for k in keys):
        raise UsageError(f"longrope file '{path}' has no {' and '.join(keys)} lists",
                         "write {" + ", ".join(f'"{k}": [...]' for k in keys) + "}")
    return {k: data[k] for k in keys}
