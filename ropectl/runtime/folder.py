"""The results folder of a sweep: where it goes, whether it may be written, and removing it when a run failed
before scoring anything. Every task uses these rules (resume, --force, never inside the model folder)."""

from __future__ import annotations

import os
import shutil
from datetime import datetime
from pathlib import Path

from ropectl.errors import OutputError, UsageError
from ropectl.io.files import check_output_dir, why_not_writable
from ropectl.runtime import lock

DEFAULT_OUT_ROOT = Path("runs")  # runs/<command>-<timestamp> where no --out is given


def output_dir(out: Path | None, resume: bool, command: str, what: str = "run") -> Path:
    """``out``; with --resume and no --out the newest ``runs/<command>-*``; else a new timestamped folder."""
    if out is not None:
        return Path(out)
    if resume:
        runs = sorted(DEFAULT_OUT_ROOT.glob(f"{command}-*"))
        if not runs:
            raise UsageError(f"--resume found no earlier {what} under runs/", "pass --out DIR of the run to resume")
        return runs[-1]
    return DEFAULT_OUT_ROOT / f"{command}-{datetime.now():%Y%m%d-%H%M%S}"


def check_output(out: Path, model: str | None, resume: bool, force: bool) -> None:
    """Refuse a busy, foreign or unwritable folder; create it (a --resume folder must exist and be writable)."""
    if out.is_dir():
        lock.check_free(out)  # a live writer is the problem to name, not a folder that is not empty
    folder = Path(model).expanduser() if model else None
    folder = folder if folder is not None and folder.is_dir() else None  # results never go into the model folder
    if resume and out.is_dir():
        check_output_dir(out, folder, force=True, replaces=False)
        if not os.access(out, os.W_OK | os.X_OK):
            raise OutputError(f"cannot write to '{out}' ({why_not_writable(out)})", "choose a writable output folder")
        return
    check_output_dir(out, folder, force, replaces=False)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".ropectl-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise OutputError(f"cannot write to '{out}' ({exc.strerror})", "choose a writable output folder") from None


def missing_root(path: Path) -> Path | None:
    """The outermost folder of ``path`` that does not exist yet (what mkdir -p would create)."""
    root = None
    for candidate in (path, *path.parents):
        if candidate.exists():
            break
        root = candidate
    return root


def remove_unused(out: Path, created: Path | None, run_file: str) -> None:
    """A run that failed before scoring anything leaves no folder behind (only what it created itself)."""
    if created is not None and out.is_dir() and {p.name for p in out.iterdir()} <= {run_file}:
        shutil.rmtree(out)
        for parent in out.parents:
            if parent == created.parent or any(parent.iterdir()):
                break
            parent.rmdir()
