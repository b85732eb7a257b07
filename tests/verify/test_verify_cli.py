"""``ropectl verify`` through the CLI on a tiny seeded Llama (trained 64, patched yarn x2 by ``ropectl patch``):
transformers' row is the reference, every other engine's row says same, differs or not checked and why, one bad
engine never stops the others, bad input is one line (exit 2), and nothing is written outside --out.

The llama.cpp and vLLM rows that score (positives and negative controls) need a GGUF conversion or vLLM's own venv:
tests/compat/test_verify.py."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from ropectl.cli.app import app
from tests.helpers.checkpoints import tiny_gguf
from tests.helpers.cli import one_line, runner
from tests.helpers.eval_data import build, write_corpus


def _digest(folder: Path) -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())).hexdigest()


@pytest.fixture(scope="module")
def patched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("verify")
    base = build("llama", root / "base", max_position_embeddings=64)
    result = runner.invoke(app, ["patch", str(base), "-m", "yarn:2", "-o", str(root / "yarn")])
    assert result.exit_code == 0, result.output
    write_corpus(root / "corpus", [400, 400])
    return root


def verify(root: Path, *args: str) -> dict:
    result = runner.invoke(app, ["verify", str(root / "yarn"), "--dataset", str(root / "corpus"), "--dtype", "fp32",
                                 "--device", "cpu", "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_rows_for_every_engine_and_the_files_only_under_out(patched: Path, isolated: Path) -> None:
    before = _digest(patched / "yarn")
    got = verify(patched, "--engine", "transformers,llama.cpp,vllm,sglang", "-o", str(isolated / "out"))
    rows = {r["engine"]: r for r in got["rows"]}
    assert got["lengths"] == [64, 128] and (got["trained"], got["target"]) == (64, 128)
    assert rows["transformers"]["verdict"] == "reference" and set(rows["transformers"]["ppl"]) == {"64", "128"}
    assert rows["llama.cpp"]["verdict"] == "not checked" and "--gguf" in rows["llama.cpp"]["why"]
    assert rows["sglang"]["verdict"] == "not checked" and "rotary only" in rows["sglang"]["why"]
    if "vllm" not in sys.modules and rows["vllm"]["verdict"] == "not checked":
        assert "pip install" in rows["vllm"]["why"] and "--engine-python vllm=" in rows["vllm"]["why"]
    assert sorted(p.name for p in (isolated / "out").iterdir()) == [".ropectl-output.json", "verify-dnll.png",
                                                                    "verify.json"] or \
        sorted(p.name for p in (isolated / "out").iterdir()) == [".ropectl-output.json", "verify.json"]
    assert json.loads((isolated / "out" / "verify.json").read_text())["rows"] == got["rows"]
    assert _digest(patched / "yarn") == before
    assert sorted(p.name for p in isolated.iterdir() if p.name != "cache") == ["out"]


def test_without_out_nothing_is_written(patched: Path, isolated: Path) -> None:
    got = verify(patched, "--engine", "transformers")
    assert [r["engine"] for r in got["rows"]] == ["transformers"] and got["files"] == []
    assert [p.name for p in isolated.iterdir() if p.name != "cache"] == []


def test_an_engine_python_runs_the_job_there(patched: Path, isolated: Path) -> None:
    """This venv's own Python, through the worker: where it has no vLLM, the row says so, from that Python."""
    got = verify(patched, "--engine", "vllm", "--engine-python", f"vllm={sys.executable}")
    (vllm,) = [r for r in got["rows"] if r["engine"] == "vllm"]
    if vllm["verdict"] == "not checked":
        assert "vllm package" in vllm["why"]
    missing = verify(patched, "--engine", "vllm", "--engine-python", "vllm=/no/such/python")
    (row,) = [r for r in missing["rows"] if r["engine"] == "vllm"]
    assert row["verdict"] == "not checked" and "no such file" in row["why"]


def test_a_serve_value_the_engine_rejects_leaves_its_row_and_the_rest_runs(patched: Path, isolated: Path) -> None:
    pytest.importorskip("llama_cpp", reason="llama.cpp's own refusal needs llama-cpp-python (make compat-llamacpp "
                        "installs it)")
    gguf = tiny_gguf(isolated / "tiny.gguf", context=64)
    got = verify(patched, "--engine", "transformers,llama.cpp", "--gguf", str(gguf), "--serve",
                 "llama.cpp=--rope-scaling yarn --rope-wobble 2")
    rows = {r["engine"]: r for r in got["rows"]}
    assert rows["llama.cpp"]["verdict"] == "not checked" and "--rope-wobble" in rows["llama.cpp"]["why"]
    assert rows["transformers"]["ppl"]


@pytest.mark.parametrize(("args", "needle"), [
    (["--engine", "transformers,vlm"], "unknown engine 'vlm'"),
    (["--engine", "transformers", "--serve", "vllm=--max-model-len 64"], "--serve vllm"),
    (["--engine", "transformers", "--serve", "transformers=--x"], "it takes no --serve settings"),
    (["--serve", "no-equals-sign"], "ENGINE=VALUE"),
])
def test_bad_input_is_one_line_and_exit_2(patched: Path, isolated: Path, args: list[str], needle: str) -> None:
    one_line(["verify", str(patched / "yarn"), "--dataset", str(patched / "corpus"), "--device", "cpu", *args],
             needle, code=2)
    assert [p.name for p in isolated.iterdir() if p.name != "cache"] == []
