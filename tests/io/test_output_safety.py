"""--force replaces only what ropectl wrote; files ropectl did not write are never deleted.

Covers patch -o and convert-layout -o (both build a staged folder and rename it into place), the current
folder as an output, a symlinked output, and eval-ppl --out pointing into the model.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ropectl.cli.app import app
from tests.helpers.checkpoints import tiny_llama, write_config

runner = CliRunner()
COMMANDS = {
    "patch": ["patch", "{src}", "-m", "yarn", "-f", "2", "-o", "{out}"],
    "convert-layout": ["convert-layout", "{src}", "--to", "interleaved", "-o", "{out}"],
}


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_llama(tmp_path_factory.mktemp("src") / "llama")


def invoke(command: str, src: Path, out: Path | str, *extra: str) -> tuple[int, str]:
    args = [a.format(src=src, out=out) for a in COMMANDS[command]]
    result = runner.invoke(app, [*args, *extra])
    return result.exit_code, result.stderr


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Fix:" in lines[0], stderr
    return lines[0]


def tree(folder: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("command", COMMANDS)
def test_force_never_deletes_unrelated_files(llama: Path, tmp_path: Path, command: str) -> None:
    out = tmp_path / "out"
    (out / "other-model").mkdir(parents=True)
    (out / "precious.txt").write_text("mine")
    (out / "other-model" / "weights.bin").write_bytes(b"\x00" * 8)
    before = tree(out)
    code, err = invoke(command, llama, out, "--force")
    assert code == 1
    line = one_line(err)
    assert "precious.txt" in line and "other-model" in line and "did not write" in line
    assert tree(out) == before
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no staging folder left either


@pytest.mark.parametrize("command", COMMANDS)
def test_force_replaces_an_output_ropectl_wrote(llama: Path, tmp_path: Path, command: str) -> None:
    out = tmp_path / "out"
    assert invoke(command, llama, out)[0] == 0
    code, err = invoke(command, llama, out)
    assert code == 1 and "--force" in one_line(err)
    code, err = invoke(command, llama, out, "--force")
    assert code == 0, err
    assert (out / "config.json").is_file() and (out / "model.safetensors").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no .ropectl-old / staging leftovers


@pytest.mark.parametrize("command", COMMANDS)
def test_force_refuses_a_ropectl_output_with_a_file_added(llama: Path, tmp_path: Path, command: str) -> None:
    out = tmp_path / "out"
    assert invoke(command, llama, out)[0] == 0
    (out / "notes.txt").write_text("my notes")
    code, err = invoke(command, llama, out, "--force")
    assert code == 1 and "notes.txt" in one_line(err)
    assert (out / "notes.txt").read_text() == "my notes"


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("how", [".", "cwd"])
def test_current_folder_as_output(llama: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str,
                                  how: str) -> None:
    home = tmp_path / "home"
    (home / "other-model").mkdir(parents=True)
    (home / "notes.txt").write_text("notes")
    monkeypatch.chdir(home)
    before = tree(home)
    code, err = invoke(command, llama, "." if how == "." else str(home), "--force")
    assert code == 1
    assert "current folder" in one_line(err)
    assert tree(home) == before and sorted(p.name for p in tmp_path.iterdir()) == ["home"]


@pytest.mark.parametrize("command", COMMANDS)
def test_force_onto_a_symlinked_output_leaves_nothing_behind(llama: Path, tmp_path: Path, command: str) -> None:
    real = tmp_path / "real"
    assert invoke(command, llama, real)[0] == 0
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    code, err = invoke(command, llama, link, "--force")
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]
    assert json.loads((link / "config.json").read_text())["model_type"] == "llama"


def test_eval_ppl_refuses_to_write_into_the_model_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    model = write_config(tmp_path / "model", {"model_type": "llama", "max_position_embeddings": 256})
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("to be or not to be " * 50)
    before = tree(model)
    for out, flag in ((model, "--force"), (model / "results", "--force"), (model, "--resume")):
        result = runner.invoke(app, ["eval-ppl", str(model), "-d", str(corpus), "-l", "64", "--out", str(out), flag])
        assert result.exit_code == 1
        assert "model folder" in one_line(result.stderr)
        assert tree(model) == before


def test_outputs_carry_a_readable_manifest(llama: Path, tmp_path: Path) -> None:
    """The manifest that marks a ropectl output is a plain file that follows the umask like the rest."""
    out = tmp_path / "out"
    assert invoke("patch", llama, out)[0] == 0
    manifests = [p for p in out.iterdir() if p.name.startswith(".ropectl")]
    assert len(manifests) == 1 and os.stat(manifests[0]).st_mode & 0o044


def test_force_after_an_in_place_patch_of_the_output(llama: Path, tmp_path: Path) -> None:
    """The backup --in-place leaves in a ropectl output is ropectl's too, so --force may still replace it."""
    out = tmp_path / "out"
    assert invoke("patch", llama, out)[0] == 0
    assert runner.invoke(app, ["patch", str(out), "-m", "none", "--in-place"]).exit_code == 0
    assert (out / "config.json.bak").is_file()
    code, err = invoke("patch", llama, out, "--force")
    assert code == 0, err
    assert not (out / "config.json.bak").exists()
