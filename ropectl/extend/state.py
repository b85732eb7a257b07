"""What a run keeps in OUT between stages: ``record.json`` (the run's identity, its plan and its data splits, written
before the first stage) and ``stages/NAME.json`` (each finished stage's record). --resume reads them back, so a
finished stage is never run again, the plan keeps its sizes (no second timing), and the data keeps its split.
OUT's manifest (``io.ownership``) lists everything extend wrote there."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ropectl.errors import OutputError, UsageError
from ropectl.extend.spec import ExtendSpec
from ropectl.io.files import atomic_write_text
from ropectl.output import dumps

RECORD = "record.json"
COMMAND = "extend"
# What changes the work: another value is another run, refused by --resume.
IDENTITY = ("model", "target", "budget_min", "max_regression", "search", "finetune", "dataset", "retention_dataset",
            "serve_with", "samples", "docs", "tasks", "trials", "steps", "space", "seed", "dtype", "device", "engine")


def identity(spec: ExtendSpec) -> dict[str, Any]:
    return json.loads(dumps({k: getattr(spec, k) for k in IDENTITY}))


def check_out(spec: ExtendSpec) -> None:
    """OUT: new (or empty), or with --resume an extend run's folder with the same identity."""
    from ropectl.io.ownership import MANIFEST

    out = spec.out
    if out.exists() and not out.is_dir():
        raise OutputError(f"'{out}' exists and is not a folder", "choose a new folder for -o")
    if not out.is_dir() or not any(out.iterdir()):
        if spec.resume:
            raise UsageError(f"--resume found no extend run in '{out}'", "drop --resume to start one")
        return
    try:
        manifest = json.loads((out / MANIFEST).read_text())
        ours = manifest.get("written_by") == "ropectl" and manifest.get("command") == COMMAND
    except (OSError, ValueError, AttributeError):
        ours = False
    if not ours:
        raise OutputError(f"'{out}' exists and ropectl extend did not write it", "choose a new folder for -o")
    if not spec.resume:
        raise OutputError(f"'{out}' holds an earlier extend run", "continue it with --resume, or choose a new -o")
    then = read_record(out).get("identity")
    if then != identity(spec):
        diff = sorted(k for k in {*identity(spec), *(then or {})} if identity(spec).get(k) != (then or {}).get(k))
        raise UsageError(f"'{out}' holds another extend run (it differs in {', '.join(diff) or 'its record'})",
                         "rerun with the flags of the stopped run, or choose a new -o")


def read_record(out: Path) -> dict[str, Any]:
    try:
        return json.loads((out / RECORD).read_text())
    except (OSError, ValueError):
        return {}


def write_record(out: Path, record: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / RECORD, dumps(record, indent=2) + "\n")
    claim_all(out)


def claim_all(out: Path) -> None:
    from ropectl.io.ownership import claim, entries_under

    claim(out, COMMAND, entries_under(out))


def done(out: Path, name: str) -> dict[str, Any] | None:
    try:
        return json.loads((out / "stages" / f"{name}.json").read_text())
    except (OSError, ValueError):
        return None


def finish(out: Path, name: str, record: dict[str, Any]) -> dict[str, Any]:
    (out / "stages").mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "stages" / f"{name}.json", dumps(record, indent=2) + "\n")
    claim_all(out)
    return json.loads(dumps(record))
