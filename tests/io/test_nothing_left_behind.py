"""Nothing of ours is left behind, and nothing outside a checkpoint is brought into an output.

SIGTERM during a GGUF patch, staging folders of a SIGKILLed run, and symlinked side files / folders.
Signals are sent from inside the process at a known point (after the temp file is written), not raced.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ropectl.cli.app import app
from tests.helpers.checkpoints import tiny_gguf, tiny_llama

runner = CliRunner()
# Runs the CLI with the GGUF writer wrapped so that the process SIGTERMs itself once the temp file is complete.
SIGTERM_AFTER_WRITE = """
import os, signal, sys
import ropectl.patch.gguf as g
real = g._write
def write(reader, path, *args):
    real(reader, path, *args)
    print("TEMP", path, flush=True)
    os.kill(os.getpid(), signal.SIGTERM)
g._write = write
from ropectl.__main__ import main
sys.argv = ["ropectl", *sys.argv[1:]]
main()
"""


# Runs the CLI with the shard writer wrapped so that the process SIGKILLs itself after the first shard.
SIGKILL_AFTER_SHARD = """
import os, signal, sys
import ropectl.layout.convert as c
real = c.write_streaming
def write(sf, dst, *args, **kw):
    real(sf, dst, *args, **kw)
    print("STAGED", dst.parent, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
c.write_streaming = write
from ropectl.__main__ import main
sys.argv = ["ropectl", *sys.argv[1:]]
main()
"""


def test_sigterm_during_a_gguf_patch_removes_the_temp_file(tmp_path: Path) -> None:
    src = tiny_gguf(tmp_path / "src.gguf")
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.run([sys.executable, "-c", SIGTERM_AFTER_WRITE, "patch", str(src), "-m", "yarn", "-f", "2",
                           "-o", str(out / "x.gguf")], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).parents[2])
    assert "TEMP" in proc.stdout, proc.stderr  # the signal came while the temp file existed
    assert proc.returncode == 130, (proc.returncode, proc.stderr)  # as documented: SIGTERM unwinds like Ctrl-C
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "interrupted" in lines[0], proc.stderr
    assert list(out.iterdir()) == []


def test_stale_staging_of_a_killed_run_is_removed(tmp_path: Path) -> None:
    """A SIGKILLed run leaves its staging folder; the next run next to that output removes it (and only it)."""
    from ropectl.io.ownership import temp_affixes

    src = tiny_llama(tmp_path / "src")
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # a pid that is certainly gone
    prefix, suffix = temp_affixes(tmp_path / "out")
    dead = suffix.replace(f"-{os.getpid()}.", f"-{child.pid}.")
    stale = tmp_path / f"{prefix}abc123{dead}"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"\x00" * 1024)
    alive = tmp_path / f"{prefix}def456{suffix}"  # this process is alive: its folder stays
    alive.mkdir()
    theirs = tmp_path / ".out.notes.txt"  # our prefix but not our naming: never touched
    theirs.write_text("x")
    result = runner.invoke(app, ["convert-layout", str(src), "--to", "interleaved", "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.stderr
    assert not stale.exists() and alive.is_dir() and theirs.read_text() == "x"


@pytest.fixture
def linked(tmp_path: Path) -> Path:
    """A checkpoint whose README.md links to a secret outside it and whose extras/ links to a folder outside."""
    private = tmp_path / "private"
    private.mkdir()
    (private / "id_rsa").write_text("SECRET KEY")
    model = tiny_llama(tmp_path / "model")
    (model / "README.md").symlink_to(private / "id_rsa")
    (model / "extras").symlink_to(private, target_is_directory=True)
    (model / "notes.md").write_text("real notes")
    (model / "NOTES.md").symlink_to(model / "notes.md")  # a link inside the folder is fine
    return model


@pytest.mark.parametrize("args", [["patch", "-m", "yarn", "-f", "2"], ["patch", "-m", "yarn", "-f", "2", "--copy"],
                                  ["convert-layout", "--to", "interleaved"]])
def test_symlinks_leaving_the_checkpoint_are_not_followed_and_are_reported(linked: Path, tmp_path: Path,
                                                                           args: list[str]) -> None:
    out = tmp_path / "out"
    result = runner.invoke(app, [args[0], str(linked), *args[1:], "-o", str(out)])
    assert result.exit_code == 0, result.stderr
    assert not (out / "README.md").exists() and not (out / "README.md").is_symlink()
    assert not (out / "extras").exists()
    assert all("SECRET" not in p.read_text(errors="ignore") for p in out.rglob("*") if p.is_file())
    assert (out / "NOTES.md").read_text() == "real notes"
    said = " ".join(result.output.split())
    assert "README.md (symlink to outside the checkpoint folder)" in said
    assert "extras/" in said


@pytest.mark.slow
def test_a_real_sigkill_leaves_staging_that_the_next_run_removes(tmp_path: Path) -> None:
    src = tiny_llama(tmp_path / "src")
    work = tmp_path / "work"
    work.mkdir()
    args = ["convert-layout", str(src), "--to", "interleaved", "-o", str(work / "out")]
    proc = subprocess.run([sys.executable, "-c", SIGKILL_AFTER_SHARD, *args], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).parents[2])
    assert proc.returncode == -9 and "STAGED" in proc.stdout, proc.stderr
    (staged,) = list(work.iterdir())  # what SIGKILL cannot clean up: the hidden staging folder
    assert staged.name.startswith(".out.") and staged.name.endswith(".ropectl-tmp")
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.stderr
    assert [p.name for p in work.iterdir()] == ["out"]


def test_weights_symlinked_out_of_the_folder_are_refused_by_patch(tmp_path: Path) -> None:
    """Skipping them would leave an incomplete checkpoint, so patch refuses instead (and writes nothing)."""
    model = tiny_llama(tmp_path / "model")
    elsewhere = tmp_path / "disk2"
    elsewhere.mkdir()
    moved = (model / "model.safetensors").rename(elsewhere / "model.safetensors")
    (model / "model.safetensors").symlink_to(moved)
    result = runner.invoke(app, ["patch", str(model), "-m", "yarn", "-f", "2", "-o", str(tmp_path / "out")])
    assert result.exit_code == 1
    assert "model.safetensors" in result.stderr and "outside the checkpoint folder" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["disk2", "model"]
