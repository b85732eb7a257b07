"""Safe output: atomic files, staged folders renamed into place, and checks before anything is written."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ropectl.errors import CheckpointError, OutputError
from ropectl.io.hub_cache import is_inside, symlink_refusal
from ropectl.io.ownership import (
    OLD,
    clean_stale,
    describe,
    forced_over,
    foreign_entries,
    temp_affixes,
    write_manifest,
)
from ropectl.io.signals import sigterm_as_interrupt


def default_mode(mode: int) -> int:
    """``mode`` as a plain create would leave it under the current umask."""
    umask = os.umask(0)
    os.umask(umask)
    return mode & ~umask


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write to a temp file beside ``path``, fsync, then rename: readers never see half a file.

    The result keeps the mode of the file it replaces, or gets the umask default: temp files start private.
    """
    path = Path(path)
    mode = path.stat().st_mode & 0o777 if path.exists() else default_mode(0o666)
    clean_stale(path)
    prefix, suffix = temp_affixes(path)
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=path.parent)
    try:
        os.chmod(tmp, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def real_output(output: Path) -> Path:
    """A symlinked output stands for the folder it points to: that folder is checked and replaced, the link kept."""
    output = Path(output)
    return output.resolve() if output.is_symlink() else output


def check_output_dir(output: Path, source: Path | None = None, force: bool = False, *, replaces: bool = True) -> None:
    """Refuse outputs that would lose data or cannot be written, before any work starts.

    ``replaces``: the output is built beside and renamed into place (patch, convert-layout), so ``--force``
    replaces a folder, and may do so only for a folder ropectl wrote. Without it (eval-ppl) files are added
    to the folder and ``--force`` only allows a non-empty one; nothing is deleted either way.
    """
    output = real_output(output)
    if source is not None and is_inside(output, source):
        raise OutputError(f"output '{output}' is inside the source model folder '{source}'",
                          "choose an output folder outside the model folder")
    if replaces:
        _check_replaceable(output, source, force)
    elif output.exists() and not output.is_dir():
        raise OutputError(f"output '{output}' exists and is not a folder", "choose a new folder name")
    elif output.is_dir() and any(output.iterdir()) and not force:
        raise OutputError(f"output folder '{output}' exists and is not empty", "choose a new folder, or pass --force")
    parent = _existing_parent(output)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write to '{parent}' ({why_not_writable(parent)})", "choose a writable output location")


def why_not_writable(path: Path) -> str:
    """os.access says no for a read-only mount too: name that cause, since changing permissions cannot fix it."""
    try:
        read_only = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    return "read-only file system" if read_only else "permission denied"


def _check_replaceable(output: Path, source: Path | None, force: bool) -> None:
    if is_inside(Path.cwd(), output):
        what = "is the current folder" if output.resolve() == Path.cwd().resolve() else "holds the current folder"
        raise OutputError(f"output '{output}' {what}, which would be replaced as a whole",
                          "name a new folder for the output, e.g. -o ./patched")
    if source is not None and is_inside(source, output):
        raise OutputError(f"output '{output}' contains the source '{source}'", "choose another output folder")
    if output.exists() and not output.is_dir():
        raise OutputError(f"output '{output}' exists and is not a folder", "choose a new folder name")
    if output.is_dir():
        _check_existing(output, force)


def _check_existing(output: Path, force: bool) -> None:
    """An existing output folder: empty, or ropectl's own (with --force); anything else is in the way."""
    if not any(output.iterdir()):
        return
    foreign = foreign_entries(output)
    if foreign and force:
        raise forced_over(output, foreign)
    if foreign:
        raise OutputError(f"output folder '{output}' exists and is not empty ({describe(foreign)})",
                          "choose a new folder (--force replaces only a folder ropectl wrote)")
    if not force:
        raise OutputError(f"output folder '{output}' holds an earlier ropectl output",
                          "pass --force to replace it, or choose a new folder")


def _existing_parent(path: Path) -> Path:
    path = Path(path).absolute()
    while not path.exists():
        path = path.parent
    return path if path.is_dir() else path.parent


@contextlib.contextmanager
def staged_dir(output: Path, force: bool = False, command: str = "ropectl") -> Iterator[Path]:
    """Yield a temp folder beside ``output``; rename it into place only if the block succeeds.

    The folder gets a manifest of what ropectl wrote, so a later ``--force`` knows what it may replace.
    """
    output = real_output(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    clean_stale(output)
    prefix, suffix = temp_affixes(output)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=prefix, suffix=suffix, dir=output.parent))
    except OSError as exc:
        raise OutputError(f"cannot create a folder in '{output.parent}' ({exc.strerror})", "choose a writable location") from None
    os.chmod(tmp, default_mode(0o777))  # mkdtemp makes it private; the output should not be
    try:
        with sigterm_as_interrupt():
            yield tmp
            write_manifest(tmp, command)
            _replace_dir(tmp, output, force)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _replace_dir(tmp: Path, output: Path, force: bool) -> None:
    if not output.exists():
        os.replace(tmp, output)
        return
    _check_existing(output, force)  # again: something may have appeared while we were writing
    prefix, suffix = temp_affixes(output, OLD)
    old = tempfile.mkdtemp(prefix=prefix, suffix=suffix, dir=output.parent)
    os.replace(output, old)  # over the empty placeholder: POSIX rename replaces an empty folder
    try:
        os.replace(tmp, output)
    except BaseException:  # an error or a signal between the two renames: put the old output back
        os.replace(old, output)
        raise
    shutil.rmtree(old, ignore_errors=True)


def link_or_copy(src: Path, dst: Path, copy: bool = False) -> str:
    """Bring a file along without copying bytes where possible; returns 'hardlink', 'symlink' or 'copy'.

    A symlinked ``src`` (a hub cache snapshot) is resolved first: Linux hardlinks the link itself otherwise,
    and a relative link such as ``../../blobs/<sha>`` would dangle in the output.
    """
    src = Path(src).resolve()
    if not copy:
        try:
            os.link(src, dst)
            return "hardlink"
        except OSError:
            pass
        try:
            os.symlink(src, dst)
            return "symlink"
        except OSError:
            pass
    shutil.copy2(src, dst)
    return "copy"


def link_tree(source: Path, staging: Path, copy: bool, exclude: Callable[[Path], bool],
              needed: Callable[[Path], bool] = lambda rel: False) -> tuple[list[tuple[str, str]], list[str]]:
    """Link (or copy) every file under ``source`` into ``staging`` but hidden and ``exclude``d ones.

    Returns ([(relative path, how)], [skipped entries with the reason]); nothing is dropped silently. A
    ``needed`` file (weights) that may not be followed is an error: without it the output would be incomplete.
    """
    source = Path(source)
    files, skipped = [], []
    for root, dirs, names in os.walk(source):
        rel = Path(root).relative_to(source)
        for name in sorted(d for d in dirs if not d.startswith(".")):
            why = symlink_refusal(Path(root) / name, source)
            if why:
                skipped.append(f"{rel / name}/ ({why})")
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not (Path(root) / d).is_symlink())
        for name in sorted(n for n in names if not n.startswith(".") and not exclude(rel / n)):
            why = symlink_refusal(Path(root) / name, source)
            if why and needed(rel / name):
                raise CheckpointError(f"'{rel / name}' is a {why} ({os.path.realpath(Path(root) / name)})",
                                      "move or copy the file into the checkpoint folder, then run again")
            if why:
                skipped.append(f"{rel / name} ({why})")
                continue
            (staging / rel).mkdir(parents=True, exist_ok=True)
            files.append((str(rel / name), link_or_copy(Path(root) / name, staging / rel / name, copy=copy)))
    return files, skipped


def save_figure(fig: Any, path: Path, **savefig: Any) -> None:
    """A matplotlib figure as a PNG written atomically; the figure is closed."""
    import io

    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", **savefig)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
