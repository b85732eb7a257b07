"""Bad inputs around files and signals that no other test guarded: pickles never unpickled, binary datasets, a resume
with no run, signals during patch, --force adding and deleting nothing, read-only commands that import neither torch
nor transformers, one-line refusals, unwritable plot targets (ids of the survey: docs/reference/errors-and-guarantees.md)."""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ropectl.cli.app import app
from tests.helpers import checkpoints
from tests.helpers.cli import one_line

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]


def test_h123_gguf_without_heads(tmp_path: Path) -> None:
    import gguf

    path = tmp_path / "h0.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(256)
    writer.add_embedding_length(64)
    writer.add_head_count(0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    one_line(["inspect", str(path)], "lacks head count", code=1)


class _Evil:
    marker: Path

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.write_text, (self.marker, "ran"))


@pytest.fixture()
def code_pickle_model(tmp_path: Path) -> tuple[Path, Path]:
    """A checkpoint whose pytorch_model.bin runs code when unpickled, and the file that code would write."""
    model = checkpoints.tiny_llama(tmp_path / "llama")
    (model / "model.safetensors").unlink()
    evil = _Evil()
    evil.marker = tmp_path / "ran"
    (model / "pytorch_model.bin").write_bytes(pickle.dumps({"w": evil}))
    return model, evil.marker


def test_h132_h133_inspect_and_patch_never_unpickle(code_pickle_model: tuple[Path, Path], tmp_path: Path) -> None:
    model, marker = code_pickle_model
    assert runner.invoke(app, ["inspect", str(model)]).exit_code == 0
    result = runner.invoke(app, ["patch", str(model), "-m", "yarn", "-f", "2", "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert not marker.exists()
    pickle.loads((model / "pytorch_model.bin").read_bytes())  # control: unpickling it does run the code
    assert marker.exists()


@pytest.mark.parametrize("suffix", [".txt", ".dat"], ids=["E-03 .txt", "E-04 .dat"])
def test_binary_dataset(isolated, tiny_model, tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"ds{suffix}"
    path.write_bytes(bytes(range(128, 256)) * 30)
    one_line(["eval-ppl", str(tiny_model), "-d", str(path), "-l", "16", "-o", "out"], "cannot read", "UTF-8")


def test_e45_resume_without_any_run(isolated, tiny_model, tiny_corpus) -> None:
    one_line(["eval-ppl", str(tiny_model), "-d", str(tiny_corpus), "-l", "16", "--resume"], "--resume", code=2)


# Runs the CLI with link_tree wrapped so that the process signals itself once the staging folder is filled.
SIGNAL_AFTER_STAGING = """
import os, signal, sys
import ropectl.patch.core as core
real = core.link_tree
def link_tree(source, staging, *args, **kw):
    out = real(source, staging, *args, **kw)
    print("STAGED", staging, flush=True)
    os.kill(os.getpid(), getattr(signal, os.environ["SIG"]))
    return out
core.link_tree = link_tree
from ropectl.__main__ import main
sys.argv = ["ropectl", *sys.argv[1:]]
main()
"""


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"], ids=["SIG-05 SIGINT", "SIG-06 SIGTERM"])
def test_signal_during_patch_output_leaves_nothing(tmp_path: Path, sig: str) -> None:
    model = checkpoints.tiny_llama(tmp_path / "llama")
    before = sorted(p.name for p in model.iterdir())
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SIG": sig}
    proc = subprocess.run([sys.executable, "-c", SIGNAL_AFTER_STAGING, "patch", str(model), "-m", "yarn", "-f", "2",
                           "--copy", "-o", str(out)], capture_output=True, text=True, env=env, timeout=600,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert "STAGED" in proc.stdout, proc.stderr  # the signal came after the staging folder was written
    assert proc.returncode == 130, (proc.returncode, proc.stderr)
    assert proc.stderr.strip().splitlines()[-1].startswith("interrupted: nothing half-written was kept")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["llama"]  # no output, no staging
    assert sorted(p.name for p in model.iterdir()) == before
    shutil.rmtree(model)


@pytest.mark.slow
def test_spec_options_reach_a_written_gguf(smollm2: Path, tmp_path: Path) -> None:
    """The spec string's options reach the GGUF path too (the survey's beta_fast drop, issue 9 defect 1)."""
    from ropectl.io.gguf_meta import read_gguf_metadata

    out = tmp_path / "y.gguf"
    result = runner.invoke(app, ["patch", str(smollm2), "-m", "yarn:2,beta_fast=16,beta_slow=2", "-o", str(out)])
    assert result.exit_code == 0, result.output
    meta = read_gguf_metadata(out)
    assert (meta["llama.rope.scaling.yarn_beta_fast"], meta["llama.rope.scaling.yarn_beta_slow"]) == (16.0, 2.0)
    assert read_gguf_metadata(smollm2).get("llama.rope.scaling.yarn_beta_fast") is None  # control: not the source's


def test_e33b_eval_ppl_force_adds_and_deletes_nothing(isolated, tiny_model, tiny_corpus) -> None:
    """docs/reference/errors-and-guarantees.md: eval-ppl's --force only allows a non-empty folder; it adds its files
    and deletes nothing."""
    busy = Path("busy")
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    (busy / "sub").mkdir()
    (busy / "sub" / "more.txt").write_text("also mine")
    refused = runner.invoke(app, ["eval-ppl", str(tiny_model), "-d", str(tiny_corpus), "-l", "64", "-o", str(busy)])
    assert refused.exit_code == 1  # control: without --force the folder is refused
    result = runner.invoke(app, ["eval-ppl", str(tiny_model), "-d", str(tiny_corpus), "-l", "64", "-o", str(busy),
                                 "--force"])
    assert result.exit_code == 0, result.output
    assert (busy / "notes.txt").read_text() == "mine" and (busy / "sub" / "more.txt").read_text() == "also mine"
    assert (busy / "results.json").is_file()


@pytest.mark.parametrize("mode", [["inspect"], ["patch", "-m", "yarn", "-f", "2", "--emit", "vllm"],
                                  ["patch", "-m", "yarn", "-f", "2", "--emit", "llama.cpp"],
                                  ["patch", "-m", "yarn", "-f", "2", "--dry-run"]],
                         ids=["inspect", "emit vllm", "emit llama.cpp", "dry-run (control)"])
def test_read_only_commands_import_neither_torch_nor_transformers(tmp_path: Path, mode: list[str]) -> None:
    """docs/reference/benchmarks.md (Speed of patch): only the verification of a written config pays for torch and
    transformers."""
    folder = checkpoints.write_config(tmp_path / "m", {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
                                                     "num_key_value_heads": 2, "max_position_embeddings": 256,
                                                     "rope_theta": 10000.0})
    args = [mode[0], str(folder), *mode[1:]]
    code = ("import sys; from typer.testing import CliRunner; from ropectl.cli.app import app;"
            f"r = CliRunner().invoke(app, {args!r}); assert r.exit_code == 0, r.output;"
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout.strip()
    assert out == ("['torch', 'transformers']" if "--dry-run" in mode else "[]")


def test_eval_ppl_refusal_is_exactly_one_stderr_line(tmp_path: Path, tiny_corpus: Path) -> None:
    """E-30 in a real process: no empty line from a progress bar that never started precedes the error."""
    model = checkpoints.tiny_llama(tmp_path / "llama")  # no tokenizer
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "ropectl", "eval-ppl", str(model), "-d", str(tiny_corpus), "-l", "64",
                           "-o", str(tmp_path / "out")], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: cannot load a tokenizer"), repr(proc.stderr)


@pytest.mark.parametrize("where", ["nofolder/w.png", "afile/w.png"], ids=["H-30 missing folder", "under a file"])
def test_plot_into_an_unwritable_place(tmp_path: Path, where: str) -> None:
    folder = checkpoints.write_config(tmp_path / "m", {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
                                                     "max_position_embeddings": 256, "rope_theta": 10000.0})
    (tmp_path / "afile").write_text("x")
    one_line(["inspect", str(folder), "--plot", str(tmp_path / where)], "cannot write plot", code=1)
    assert not (tmp_path / "nofolder").exists() and (tmp_path / "afile").read_text() == "x"
