"""A full disk and unreadable folders, for real: a tiny tmpfs in a private mount namespace, and an unprivileged user.

Each ends in one line naming the problem and the fix, with nothing half-written left behind.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import checkpoints
from tests.helpers import eval_data as fx

pytestmark = pytest.mark.slow  # subprocesses under a tmpfs or another user

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(home), "XDG_CACHE_HOME": str(home / "cache"),
            "MPLCONFIGDIR": str(home / "mpl"), "HF_HOME": str(home / "hf"), "HF_HUB_OFFLINE": "1"}


def _error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Fix:" in lines[0], stderr
    assert "unexpected" not in lines[0] and "Traceback" not in stderr
    return lines[0]


def _can_mount_tmpfs() -> bool:
    if not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=16k tmpfs /mnt"],
                           capture_output=True, text=True)
    return probe.returncode == 0


def on_small_fs(small: Path, size: str, *args: str, home: Path) -> subprocess.CompletedProcess[str]:
    """Run ropectl with a tmpfs of ``size`` mounted at ``small``, then list what it left there (on stdout)."""
    script = ('mount -t tmpfs -o size="$1" tmpfs "$2" || exit 99; d="$2"; shift 2; "$@"; rc=$?; '
              'echo "LEFT:$(ls -A "$d" | tr "\\n" " ")"; exit $rc')
    return subprocess.run(["unshare", "-rm", "sh", "-c", script, "sh", size, str(small), sys.executable, "-m",
                           "ropectl", *args], capture_output=True, text=True, env=_env(home), timeout=600)


needs_tmpfs = pytest.mark.skipif(not _can_mount_tmpfs(), reason="cannot mount a tmpfs in a user/mount namespace")


@needs_tmpfs
@pytest.mark.parametrize("case", ["DF-01 convert-layout", "DF-02 patch --copy"])
def test_full_disk_is_one_line_and_leaves_nothing(tmp_path: Path, case: str) -> None:
    model = checkpoints.tiny_llama(tmp_path / "llama", hidden_size=96, intermediate_size=256)
    small = tmp_path / "small"
    small.mkdir()
    args = (["convert-layout", str(model), "--to", "interleaved", "-o", str(small / "out")] if "DF-01" in case
            else ["patch", str(model), "-m", "yarn", "-f", "2", "--copy", "-o", str(small / "out")])
    proc = on_small_fs(small, "48k", *args, home=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "no space left on the device" in _error_line(proc.stderr)
    assert proc.stdout.strip().endswith("LEFT:"), proc.stdout  # no staging folder, no partial file


@needs_tmpfs
def test_full_disk_gguf_patch(tmp_path: Path, smollm2: Path) -> None:
    """DF-04: the GGUF writer's short write (numpy 'N requested and M written') also ends as one line."""
    small = tmp_path / "small"
    small.mkdir()
    # 60 MB: the header fits and the tensor data (98 MB) does not, so the failure comes from numpy's tofile.
    proc = on_small_fs(small, "60m", "patch", str(smollm2), "-m", "yarn", "-f", "2", "-o", str(small / "s.gguf"),
                       home=tmp_path)
    assert proc.returncode == 1, proc.stderr
    line = _error_line(proc.stderr)
    # numpy reports the short write as 'N requested and M written' without an errno; the cause must be named.
    assert "no space left on the device" in line and "requested and" not in line, line
    assert proc.stdout.strip().endswith("LEFT:"), proc.stdout


def on_read_only(folder: Path, *args: str, home: Path) -> subprocess.CompletedProcess[str]:
    """Run ropectl with ``folder`` bind-mounted read-only (a private mount namespace): EROFS, not EACCES."""
    script = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" || exit 99; shift; "$@"'
    return subprocess.run(["unshare", "-rm", "sh", "-c", script, "sh", str(folder), sys.executable, "-m", "ropectl",
                           *args], capture_output=True, text=True, env=_env(home), timeout=600)


@needs_tmpfs
@pytest.mark.parametrize("case", ["RO-01 convert-layout", "RO-02 patch -o", "RO-03 patch --in-place",
                                  "RO-04 eval-ppl", "RO-06 patch GGUF"])
def test_read_only_file_system_is_named(tmp_path: Path, case: str) -> None:
    """As root, os.access says 'no' on a read-only mount too: the line must say read-only, not permission denied."""
    model = fx.build("llama", tmp_path / "model")
    ro = tmp_path / "ro"
    ro.mkdir()
    gguf = tmp_path / "m.gguf"
    if "GGUF" in case:
        from tests.helpers.checkpoints import tiny_gguf

        tiny_gguf(gguf)
    corpus = fx.write_corpus(tmp_path / "corpus", [300])
    args = {"RO-01": ["convert-layout", str(model), "--to", "interleaved", "-o", str(ro / "out")],
            "RO-02": ["patch", str(model), "-m", "yarn", "-f", "2", "-o", str(ro / "out")],
            "RO-03": ["patch", str(model), "-m", "yarn", "-f", "2", "--in-place"],
            "RO-04": ["eval-ppl", str(model), "-d", str(corpus), "-l", "64", "-o", str(ro / "run")],
            "RO-06": ["patch", str(gguf), "-m", "yarn", "-f", "2", "-o", str(ro / "x.gguf")]}[case.split()[0]]
    proc = on_read_only(model if "RO-03" in case else ro, *args, home=tmp_path)
    assert proc.returncode == 1, proc.stderr
    line = _error_line(proc.stderr)
    assert "read-only file system" in line and "permission denied" not in line, line
    assert not any(ro.iterdir())


def test_permission_denied_is_still_named_as_such(tmp_path: Path) -> None:
    """Negative control for the check above: a writable mount whose folder refuses writes is not 'read-only'."""
    from ropectl.io.files import why_not_writable

    assert why_not_writable(tmp_path) == "permission denied"


@pytest.fixture(scope="module")
def shared_dir() -> Iterator[Path]:
    """A world-readable folder (pytest's tmp folders are private to their owner) with a root-only subfolder."""
    if not shutil.which("setpriv") and os.geteuid() == 0:
        pytest.skip("setpriv is needed to drop privileges")
    if os.geteuid() == 0:
        # A checkout inside a private folder (a clone under mktemp -d) cannot be run by the unprivileged user.
        probe = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", sys.executable,
                                "-c", "import ropectl.cli.app"], capture_output=True, text=True, cwd="/", timeout=120)
        if probe.returncode != 0:
            pytest.skip(f"uid {NOBODY} cannot run this checkout's interpreter or ropectl (a private parent folder?)")
    top = Path(tempfile.mkdtemp(prefix="ropectl-perm-"))
    try:
        top.chmod(0o755)
        fx.build("llama", top / "model")
        fx.write_corpus(top / "corpus", [300, 200])
        for p in [top, *top.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        home = top / "home"
        home.mkdir()
        if os.geteuid() == 0:
            os.chown(home, NOBODY, NOBODY)
        (top / "rootonly").mkdir(mode=0o000)
        yield top
    finally:
        (top / "rootonly").chmod(0o755)
        shutil.rmtree(top, ignore_errors=True)


def as_user(top: Path, *args: str) -> subprocess.CompletedProcess[str]:
    prefix = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"] if os.geteuid() == 0 else []
    return subprocess.run([*prefix, sys.executable, "-m", "ropectl", *args], capture_output=True, text=True,
                          env=_env(top / "home"), cwd=top / "home", timeout=600)


@pytest.mark.parametrize("case", ["PERM-01 convert-layout", "PERM-03 eval-ppl", "PERM-06 patch"])
def test_output_under_an_unsearchable_folder(shared_dir: Path, case: str) -> None:
    target = str(shared_dir / "rootonly" / "x")
    model = str(shared_dir / "model")
    args = {"PERM-01": ["convert-layout", model, "--to", "interleaved", "-o", target],
            "PERM-03": ["eval-ppl", model, "-d", str(shared_dir / "corpus"), "-l", "64", "-o", target],
            "PERM-06": ["patch", model, "-m", "yarn", "-f", "2", "-o", target]}[case.split()[0]]
    proc = as_user(shared_dir, *args)
    assert proc.returncode == 1, proc.stderr
    assert "permission denied" in _error_line(proc.stderr)


def test_perm05_unreadable_token_cache_is_skipped(shared_dir: Path) -> None:
    """The token cache is an optimisation: an unreadable --cache-dir must not stop the evaluation."""
    out = shared_dir / "home" / "run05"
    proc = as_user(shared_dir, "eval-ppl", str(shared_dir / "model"), "-d", str(shared_dir / "corpus"), "-l", "64",
                   "-m", "none", "-o", str(out), "--cache-dir", str(shared_dir / "rootonly" / "cache"), "--json")
    assert proc.returncode == 0, proc.stderr
