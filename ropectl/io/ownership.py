"""What ropectl wrote, so that it deletes nothing else: output manifests, and its own stale temp entries.

Every folder ropectl renames into place (``patch -o``, ``convert-layout -o``) carries ``.ropectl-output.json``,
the list of what ropectl put there. ``--force`` may replace such a folder only while it holds nothing else.
Temp entries are named ``.NAME.<random>.<host>-<pid>.ropectl-{tmp,old}``: a later run next to the same
output removes those whose process on this host is gone (SIGKILL, power loss), and never anything else.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
from pathlib import Path

from ropectl.errors import OutputError
from ropectl.output import dumps

MANIFEST = ".ropectl-output.json"
TMP, OLD = "ropectl-tmp", "ropectl-old"


def entries_under(folder: Path) -> list[str]:
    """Everything under ``folder`` as manifest entries: relative paths, folders with a trailing /."""
    entries = []
    for root, dirs, files in os.walk(folder):
        rel = Path(root).relative_to(folder)
        entries += [(rel / d).as_posix() + "/" for d in dirs] + [(rel / f).as_posix() for f in files]
    return sorted(entries)


def write_manifest(folder: Path, command: str) -> None:
    """List everything under ``folder`` (written by ropectl, about to be renamed into place)."""
    record = {"written_by": "ropectl", "command": command, "entries": entries_under(folder)}
    (Path(folder) / MANIFEST).write_text(dumps(record, indent=1) + "\n", encoding="utf-8")


def claim(folder: Path, command: str, names: list[str]) -> None:
    """List ``names`` as ropectl's in ``folder``'s manifest, creating it: for a folder ropectl fills in place over a
    run (search's OUT) rather than renames into place. A name listed that is never written is harmless."""
    path = Path(folder) / MANIFEST
    record = {"written_by": "ropectl", "command": command, "entries": sorted(_listed(Path(folder)) | set(names))}
    path.write_text(dumps(record, indent=1) + "\n", encoding="utf-8")


def note_written(folder: Path, names: list[str]) -> None:
    """Add files ropectl wrote later (``patch --in-place``'s backup) to a folder's manifest, if it has one."""
    path = Path(folder) / MANIFEST
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        entries = set(record["entries"]) | set(names)
    except (OSError, ValueError, TypeError, KeyError):
        return  # not a folder ropectl wrote: nothing to note
    record["entries"] = sorted(entries)
    path.write_text(dumps(record, indent=1) + "\n", encoding="utf-8")


def _listed(folder: Path) -> set[str]:
    try:
        record = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        entries = record["entries"] if record.get("written_by") == "ropectl" else []
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return set()  # no manifest, or not one ropectl wrote: nothing here is known to be ours
    return {e for e in entries if isinstance(e, str)}


def foreign_entries(folder: Path) -> list[str]:
    """What in ``folder`` ropectl did not write (a folder not listed is named once, with a trailing /)."""
    folder = Path(folder)
    listed, out = _listed(folder), []

    def walk(path: Path, rel: str) -> None:
        for entry in sorted(os.scandir(path), key=lambda e: e.name):
            name = rel + entry.name
            if not rel and entry.name == MANIFEST and listed:
                continue
            if entry.is_dir(follow_symlinks=False) and name + "/" in listed:
                walk(Path(entry.path), name + "/")
            elif entry.is_dir(follow_symlinks=False):
                out.append(name + "/")
            elif name not in listed:
                out.append(name)

    try:
        walk(folder, "")
    except OSError as exc:
        raise OutputError(f"cannot list '{folder}' ({exc.strerror})", "check its permissions") from None
    return out


def forced_over(folder: Path, foreign: list[str]) -> OutputError:
    """The refusal of --force on a folder that holds files ropectl did not write (patch, finetune, search alike)."""
    return OutputError(f"output folder '{folder}' holds files ropectl did not write ({describe(foreign)}); --force "
                       "replaces only a folder ropectl wrote", "move them away, or choose a new folder")


def check_owned(folder: Path) -> None:
    """``--force`` on a folder a run fills in place (search's OUT): refused while anything in it is not ropectl's."""
    folder = Path(folder)
    if folder.is_dir():
        foreign = foreign_entries(folder)
        if foreign:
            raise forced_over(folder, foreign)


def describe(entries: list[str], limit: int = 5) -> str:
    more = f" and {len(entries) - limit} more" if len(entries) > limit else ""
    return ", ".join(entries[:limit]) + more


def _host() -> str:
    return hashlib.sha1(socket.gethostname().encode()).hexdigest()[:8]


def temp_affixes(output: Path, kind: str = TMP) -> tuple[str, str]:
    """(prefix, suffix) for ``tempfile.mkstemp`` / ``mkdtemp`` beside ``output``, naming this process."""
    return f".{Path(output).name}.", f".{_host()}-{os.getpid()}.{kind}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: alive, someone else's
        return True
    return True


def clean_stale(output: Path) -> list[str]:
    """Remove our temp entries next to ``output`` whose process (on this host) is gone; return their names."""
    output = Path(output)
    prefix, host = f".{output.name}.", _host()
    removed = []
    try:
        candidates = [e for e in os.scandir(output.parent) if e.name.startswith(prefix)]
    except OSError:
        return []
    for entry in candidates:
        parts = entry.name[len(prefix):].rsplit(".", 2)
        if len(parts) != 3 or parts[2] not in (TMP, OLD) or entry.is_symlink():
            continue
        owner, _, pid = parts[1].partition("-")
        if owner != host or not pid.isdigit() or _alive(int(pid)):
            continue
        with contextlib.suppress(OSError):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
            removed.append(entry.name)
    return removed
