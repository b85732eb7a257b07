"""Safe output: atomic files, staged folders renamed into place, and checks before anything is written."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ropectl.errors import OutputError


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
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
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


def is_inside(child: Path, parent: Path) -> bool:
    child, parent = Path(child).resolve(), Path(parent).resolve()
    return child == parent or parent in child.parents


def check_output_dir(output: Path, source: Path | None = None, force: bool = False) -> None:
    """Refuse outputs that would lose data or cannot be written, before any work starts."""
    output = Path(output)
    if source is not None and is_inside(output, source):
        raise OutputError(f"output '{output}' is inside the source '{source}'", "choose an output folder outside the source")
    if source is not None and is_inside(source, output):
        raise OutputError(f"output '{output}' contains the source '{source}'", "choose another output folder")
    if output.exists() and not output.is_dir():
        raise OutputError(f"output '{output}' exists and is not a folder", "choose a new folder name")
    if output.is_dir() and any(output.iterdir()) and not force:
        raise OutputError(f"output folder '{output}' exists and is not empty", "choose a new folder, or pass --force")
    parent = _existing_parent(output)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write to '{parent}' (permission denied)", "choose a writable output location")


def _existing_parent(path: Path) -> Path:
    path = Path(path).absolute()
    while not path.exists():
        path = path.parent
    return path if path.is_dir() else path.parent


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Let SIGTERM unwind like Ctrl-C so staged output is cleaned up."""

    def raise_interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, raise_interrupt)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def staged_dir(output: Path, force: bool = False) -> Iterator[Path]:
    """Yield a temp folder beside ``output``; rename it into place only if the block succeeds."""
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{output.name}.", suffix=".ropectl-tmp", dir=output.parent))
    except OSError as exc:
        raise OutputError(f"cannot create a folder in '{output.parent}' ({exc.strerror})", "choose a writable location") from None
    os.chmod(tmp, default_mode(0o777))  # mkdtemp makes it private; the output should not be
    try:
        with _sigterm_as_interrupt():
            yield tmp
            _replace_dir(tmp, output, force)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _replace_dir(tmp: Path, output: Path, force: bool) -> None:
    if output.exists():
        if any(output.iterdir()) and not force:
            raise OutputError(f"output folder '{output}' appeared while writing", "choose a new folder, or pass --force")
        old = output.with_name(f".{output.name}.ropectl-old")
        os.replace(output, old)
        os.replace(tmp, output)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, output)


def link_or_copy(src: Path, dst: Path, copy: bool = False) -> str:
    """Bring a file along without copying bytes where possible; returns 'hardlink', 'symlink' or 'copy'."""
    if not copy:
        try:
            os.link(src, dst)
            return "hardlink"
        except OSError:
            pass
        try:
            os.symlink(Path(src).resolve(), dst)
            return "symlink"
        except OSError:
            pass
    shutil.copy2(src, dst)
    return "copy"
