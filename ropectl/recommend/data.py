"""What ``recommend`` reads: an eval-ppl folder (summary.json, and results.json's per-document cells for paired
intervals) and an eval-tasks folder (tasks.json's per-trial scores; an eval-passkey folder reads as the one task
``passkey``). Each becomes plain dicts: the rule in ``recommend`` is pure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ropectl.errors import DataError


def load_ppl(folder: Path) -> dict[str, Any]:
    data = _read(Path(folder) / "summary.json", "eval-ppl", "--ppl", ("meta", "table"))
    cells = Path(folder) / "results.json"
    if cells.is_file():
        rows = _read(cells, "eval-ppl", "--ppl", ("results",))["results"]
        data["cells"] = [{k: r[k] for k in ("method", "length", "doc", "tokens", "nll_sum")} for r in rows]
    return data


def load_tasks(folder: Path) -> dict[str, Any]:
    """Per-trial rows {task, method, length, trial, score} from eval-tasks (or eval-passkey) results."""
    folder = Path(folder)
    if (folder / "passkey.json").is_file() and not (folder / "tasks.json").is_file():
        data = _read(folder / "passkey.json", "eval-passkey", "--tasks", ("meta", "results"))
        depths = sorted({float(r["depth"]) for r in data["results"]})
        per = max((int(r["trial"]) for r in data["results"]), default=0) + 1
        rows = [{"task": "passkey", "method": r["method"], "length": int(r["length"]),
                 "trial": depths.index(float(r["depth"])) * per + int(r["trial"]), "score": float(bool(r["success"]))}
                for r in data["results"]]
        return {"meta": data["meta"], "rows": rows}
    data = _read(folder / "tasks.json", "eval-tasks", "--tasks", ("meta", "results"))
    rows = [{k: r[k] for k in ("task", "method", "length", "trial", "score")} for r in data["results"]]
    return {"meta": data["meta"], "rows": rows}


def _read(path: Path, command: str, flag: str, keys: tuple[str, ...]) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        for key in keys:
            data[key]  # noqa: B018  # each must be there
        return data
    except FileNotFoundError:
        raise DataError(f"'{path}' does not exist", f"pass {flag} the --out folder of a finished `ropectl "
                        f"{command}` run") from None
    except (OSError, ValueError, KeyError, TypeError):
        raise DataError(f"'{path}' is not {command} results", f"pass {flag} the --out folder of a finished "
                        f"`ropectl {command}` run") from None
