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


SAME_SETUP = ("dataset", "mode", "stride", "trained_context")  # what must agree for runs of two models to be paired


def load_ppl_runs(folders: list[Path]) -> dict[str, Any]:
    """One eval-ppl folder, or the runs of several models on the same documents (a patched model, then its
    fine-tune: ``recommend --ppl PATCHED --ppl FINETUNED``) as one result, so the paired rule compares models as it
    compares methods. The first run's methods keep their names (its ``none`` stays the reference); a later run's
    are named by its model folder (``NAME`` for the checkpoint as it is, ``NAME/METHOD`` otherwise), and
    ``meta["runs"]`` maps each such name to [model, method] for the commands that ship it."""
    runs = [load_ppl(f) for f in folders]
    first = runs[0]
    if len(runs) == 1:
        return first
    from ropectl.runtime.model import AS_IS

    meta = {**first["meta"], "methods": list(first["meta"]["methods"]),
            "screened_out": list(first["meta"].get("screened_out", ())), "runs": {}}
    merged = {"meta": meta, "table": list(first["table"]), "cells": list(first.get("cells", []))}
    for folder, run in zip(folders[1:], runs[1:]):
        _check_paired(first, run, Path(folder))
        model = str(run["meta"]["model"])
        name = Path(model).name or model
        rename = {m: name if m == AS_IS else f"{name}/{m}" for m in run["meta"]["methods"]}
        if set(rename.values()) & set(meta["methods"]):
            raise DataError(f"two --ppl runs name the same method ({name})", "pass runs of models in differently "
                            "named folders")
        meta["methods"] += list(rename.values())
        meta["screened_out"] += [rename[m] for m in run["meta"].get("screened_out", ())]
        meta["runs"].update({new: [model, old] for old, new in rename.items()})
        merged["table"] += [{**r, "method": rename[r["method"]]} for r in run["table"]]
        merged["cells"] += [{**c, "method": rename[c["method"]]} for c in run.get("cells", [])]
    return merged


def _check_paired(first: dict[str, Any], run: dict[str, Any], folder: Path) -> None:
    """Runs compared document by document must have scored the same documents the same way."""
    fix = "run eval-ppl on each model with the same --dataset, --docs, --lengths and --mode, then pass those folders"
    for key in SAME_SETUP:
        if first["meta"].get(key) != run["meta"].get(key):
            raise DataError(f"'{folder}' was run with another {key} ({run['meta'].get(key)!r}, not "
                            f"{first['meta'].get(key)!r}), so its documents cannot be paired", fix)

    def docs(data: dict[str, Any]) -> dict[int, set[str]]:
        out: dict[int, set[str]] = {}
        for c in data.get("cells", []):
            out.setdefault(int(c["length"]), set()).add(str(c["doc"]))
        return out

    mine, theirs = docs(first), docs(run)
    for length in set(mine) & set(theirs):
        if mine[length] != theirs[length]:
            raise DataError(f"'{folder}' scored other documents at {length} tokens than the first --ppl run", fix)


def with_ships(ppl: dict[str, Any], model: str) -> dict[str, Any]:
    """The results with what the checkpoint ships (``meta["ships"]``), read from the model's config.json where
    results written before eval-ppl recorded it lack it and the model is a local folder; else as they are."""
    import json

    config = Path(model) / "config.json"
    if "ships" in ppl["meta"] or not config.is_file():
        return ppl
    from ropectl.errors import RopectlError
    from ropectl.runtime.model import ships

    try:
        shipped = ships(json.loads(config.read_text(encoding="utf-8")))
    except (OSError, ValueError, RopectlError):  # unreadable: the ship line says it does not know
        return ppl
    return {**ppl, "meta": {**ppl["meta"], "ships": shipped}}
