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
from tests.helpers.cli import run_printed

runner = CliRunner()


def _run_all(commands: list[str], cwd: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Run each printed command (comments are not commands) in ``cwd``; return their stdout."""
    monkeypatch.chdir(cwd)
    return run_printed(commands)


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
    # then, as a comment, verify on the written file in llama.cpp (which runs GGUF files) against transformers
    assert data["commands"][-1] == ("# then check it in the serving engines: ropectl verify "
                                    "SmolLM2-135M-Instruct.Q4_1-yarn2.gguf -t 16384 --engine transformers,llama.cpp")


def _vllm_dynamic_fixes(folder: Path) -> list[str]:
    report = json.loads(runner.invoke(app, ["inspect", str(folder), "--engines", "--json"]).stdout)
    return [v["fix"] for v in report["engines"] if v["engine"] == "vLLM" and v["fix"] and "dynamic" in v["fix"]]


def test_inspect_prints_the_real_dynamic_command_for_vllm(tmp_path: Path) -> None:
    """inspect --engines names the model and its factor in the static-dynamic fix for vLLM, and the command runs."""
    from tests.helpers.checkpoints import write_config

    llama = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
             "max_position_embeddings": 1024, "rope_theta": 10000.0}
    base = write_config(tmp_path / "base", llama)
    patched = tmp_path / "patched"
    assert runner.invoke(app, ["patch", str(base), "-m", "dynamic:2.5", "-o", str(patched)]).exit_code == 0
    by_hand = write_config(tmp_path / "by hand", {**llama, "rope_scaling": {"rope_type": "dynamic", "factor": 3.0}})
    for folder, factor, extra in ((patched, "2.5", []), (by_hand, "3", ["--replace-existing"])):
        fixes = _vllm_dynamic_fixes(folder)
        assert fixes and "MODEL" not in " ".join(fixes)
        command = fixes[0].split("`")[1]
        assert shlex.split(command) == ["ropectl", "patch", str(folder), "-m", f"dynamic:{factor}", *extra, "--emit",
                                        "vllm"]
        result = runner.invoke(app, shlex.split(command)[1:])  # runs as printed
        assert result.exit_code == 0, result.output
        assert shlex.split(result.stdout)[:3] == ["vllm", "serve", str(folder)]
    # control: a yarn folder gets no dynamic command
    yarn = tmp_path / "yarn"
    assert runner.invoke(app, ["patch", str(base), "-m", "yarn:2", "-o", str(yarn)]).exit_code == 0
    assert _vllm_dynamic_fixes(yarn) == []
