"""One writer per results folder: an advisory lock on ``--out/.ropectl.lock``.

The lock is ``flock`` on an open file, so the kernel drops it when its holder dies, however it dies: a
lock file left by a killed run is stale by construction and is simply taken over. The file holds the
holder's pid only so that the refusal can name it.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from ropectl.errors import OutputError

LOCK = ".ropectl.lock"


@dataclass
class OutLock:
    path: Path
    fd: int

    def release(self) -> None:
        if self.fd < 0:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.path)  # still holding the lock: nobody can take it between unlink and close
        os.close(self.fd)
        self.fd = -1


def _busy(out: Path, pid: str) -> OutputError:
    who = f"pid {pid}" if pid else "another process"
    return OutputError(f"another ropectl run ({who}) is writing '{out}' right now",
                       "wait for it to finish, or choose another --out")


def _holder_pid(fd: int) -> str:
    with contextlib.suppress(OSError):
        return os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    return ""


def check_free(out: Path) -> None:
    """Raise if a live process holds the lock of ``out`` (cheap: nothing is created)."""
    import fcntl

    try:
        fd = os.open(out / LOCK, os.O_RDONLY)
    except OSError:
        return  # no lock file: nobody holds it
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise _busy(out, _holder_pid(fd)) from None
    finally:
        os.close(fd)


def acquire(out: Path) -> OutLock:
    """Take the lock of ``out`` (a folder that exists) or raise OutputError naming the holder."""
    import fcntl

    path = out / LOCK
    for _ in range(10):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _holder_pid(fd)
            os.close(fd)
            raise _busy(out, pid) from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:  # not a file its last holder unlinked while we waited to open it
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
            return OutLock(path, fd)
        os.close(fd)
    raise _busy(out, "")
