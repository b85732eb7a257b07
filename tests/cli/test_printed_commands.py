"""Every ship line recommend prints runs as printed: on a tiny Hugging Face folder and on the real SmolLM2 GGUF.

(The vLLM commands patch prints run in vLLM in tests/compat/test_vllm*.py, and the lm-eval one in lm-eval in
tests/compat/test_lm_eval.py.)
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ropectl.cli.app import app
from tests.helpers.checkpoints import tiny_llama
from tests.helpers.checkpoints import write_recommend_results as write

runner = CliRunner()


def _run_all(commands: list[str], cwd: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Run each printed command (comments are not commands) in ``cwd``; return their stdout."""
    monkeypatch.chdir(cwd)
    outputs = []
    for line in commands:
        if line.startswith("#"):
            continue
        argv = shlex.split(line)
        assert argv[0] == "ropectl", line
        result = runner.invoke(app, argv[1:])
        assert result.exit_code == 0, f"{line}\n{result.output}"
        outputs.append(result.stdout)
    return outputs


@pytest.mark.parametrize("serve_with", [None, "transformers", "vllm,llama.cpp"])
def test_recommend_ship_lines_run_on_a_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              serve_with: str | None) -> None:
    model = tiny_llama(tmp_path / "my-llama", max_position_embeddings=8192)
    ppl, pk = write(tmp_path / "results")
    args = ["recommend", str(model), "-t", "16k", "--ppl", str(ppl), "--tasks", str(pk), "--json"]
    data = json.loads(runner.invoke(app, args + (["--serve-with", serve_with] if serve_with else [])).stdout)
    work = tmp_path / "work"
    work.mkdir()
    _run_all(data["commands"], work, monkeypatch)
    written = json.loads((work / f"my-llama-{data['winner'].replace(':', '')}" / "config.json").read_text())
    assert written["ropectl"]["method"] == data["winner"]


def test_recommend_ship_lines_run_on_the_gguf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, smollm2: Path) -> None:
    ppl, pk = write(tmp_path / "results")
    data = json.loads(runner.invoke(app, ["recommend", str(smollm2), "-t", "16k", "--ppl", str(ppl), "--tasks",
                                          str(pk), "--json"]).stdout)
    assert data["winner"] == "yarn:2" and not any("dynamic" in c for c in data["commands"])
    work = tmp_path / "work"
    work.mkdir()
    outputs = _run_all(data["commands"], work, monkeypatch)
    assert (work / "SmolLM2-135M-Instruct.Q4_1-yarn2.gguf").is_file() and not (smollm2.parent / "x").exists()
    assert outputs[-1].startswith("llama-server -m ")  # the --emit llama.cpp line
