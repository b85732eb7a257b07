"""What ``recommend`` reads: an eval-ppl folder and an eval-tasks (or eval-passkey) folder, through the readers their
results modules define (``load_outputs``: one parser per results format), as plain dicts; the rule in ``decide`` is
pure. This module only chooses the reader and turns a missing or foreign folder into one line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ropectl.errors import DataError


def load_ppl(folder: Path) -> dict[str, Any]:
    from ropectl.eval.tasks.ppl import results

    return _load(results.load_outputs, Path(folder), Path(folder) / results.SUMMARY, "eval-ppl", "--ppl")


def load_tasks(folder: Path) -> dict[str, Any]:
    """Per-trial rows {task, method, length, trial, score} from eval-tasks (or eval-passkey) results."""
    from ropectl.eval.tasks.passkey import results as passkey
    from ropectl.eval.tasks.ruler import results as ruler

    folder = Path(folder)
    if (folder / passkey.JSON).is_file() and not (folder / ruler.JSON).is_file():
        return _load(passkey.load_outputs, folder, folder / passkey.JSON, "eval-passkey", "--tasks")
    return _load(ruler.load_outputs, folder, folder / ruler.JSON, "eval-tasks", "--tasks")


def _load(read: Callable[[Path], dict[str, Any]], folder: Path, main: Path, command: str, flag: str) -> dict[str, Any]:
    fix = f"pass {flag} the --out folder of a finished `ropectl {command}` run"
    if not main.is_file():
        raise DataError(f"'{main}' does not exist", fix)
    try:
        return read(folder)
    except (OSError, ValueError, KeyError, TypeError):
        raise DataError(f"'{main}' is not {command} results", fix) from None
