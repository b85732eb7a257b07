"""verify tier: ``ropectl verify`` says *same* where an engine serves a patched checkpoint as transformers computes
it, and *differs*, by at least 5x its tolerance, where it does not.

A tiny seeded Llama (trained 64, SmolLM2's tokenizer, q/k scaled so RoPE shows in the log-probs: llama_cpp_convert)
is patched by ropectl (yarn:2, linear:2, llama3:2, yarn:2 with an attention factor, dynamic:2) and converted by
llama.cpp's own convert_hf_to_gguf.py (the llamacpp-convert venv):

- llama.cpp (in-process, llama-cpp-python in this venv): the unpatched GGUF with the flags ``patch --emit llama.cpp``
  prints (--serve llama.cpp=...), and the GGUF converted from the llama3 folder as it ships (its rope_freqs tensor),
  say same. Negative controls: the unpatched GGUF run as its metadata says beside the yarn folder (a --gguf whose
  RoPE disagrees with the folder), and the attention-factor line with its --override-kv dropped.
- vLLM (its cached venv, through --engine-python): the yarn folder says same; dynamic NTK, which vLLM serves as one
  static base for --max-model-len, differs below the served maximum (measured: 1.2e-1 per token in the trained
  window, 1,200x the tolerance).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from llama_cpp_convert import CACHE, FAMILIES, checkpoint, convert, missing  # noqa: E402

from tests.helpers.cli import runner  # noqa: E402

VLLM_PYTHON = CACHE / "vllm" / "bin" / "python"
VLLM_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}
FACTOR = 5  # a negative control exceeds its tolerance by at least this much


def cli(*args: str) -> Any:
    from ropectl.cli.app import app

    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    why = missing()
    if why:
        pytest.skip(why)
    root = tmp_path_factory.mktemp("verify-tier")
    checkpoint(root / "base", FAMILIES["llama"])
    out = {"base": root / "base", "base.gguf": convert(root / "base")}
    for name, method in (("yarn", "yarn:2"), ("linear", "linear:2"), ("llama3", "llama3:2"),
                         ("yarn-af", "yarn:2,attention_factor=1.3")):
        cli("patch", str(root / "base"), "-m", method, "-o", str(root / name))
        out[name] = root / name
    out["llama3.gguf"] = convert(root / "llama3")
    return out


@pytest.fixture(scope="module")
def vllm_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same Llama with head_dim 32: vLLM's CPU attention has no kernel for head_dim 16."""
    root = tmp_path_factory.mktemp("verify-tier-vllm")
    checkpoint(root / "base", {**FAMILIES["llama"], "hidden_size": 128, "head_dim": 32})
    for name, method in (("yarn", "yarn:2"), ("dynamic", "dynamic:2")):
        cli("patch", str(root / "base"), "-m", method, "-o", str(root / name))
    return {"yarn": root / "yarn", "dynamic": root / "dynamic"}


def flags(gguf: Path, method: str) -> str:
    """The flags ``patch GGUF -m METHOD --emit llama.cpp`` prints after -m FILE."""
    line = next(x for x in cli("patch", str(gguf), "-m", method, "--emit", "llama.cpp").splitlines()
                if x.startswith("llama-server -m "))
    return line.split(" ", 3)[3]


def verify(model: Path, *args: str) -> dict[str, Any]:
    got = json.loads(cli("verify", str(model), "--dtype", "fp32", "--device", "cpu", "--json", *args))
    print(json.dumps({r["engine"]: [r["verdict"], r["why"]] for r in got["rows"]}, indent=1))
    return {r["engine"]: r for r in got["rows"]}


def _llama_cpp() -> None:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not in this venv: LLAMA_CPP_INTO=$PWD/.venv/bin/python sh "
                    "tests/compat/engine_venvs.sh llamacpp")


@pytest.mark.parametrize("method", ["yarn:2", "linear:2", "yarn:2,attention_factor=1.3"])
def test_llama_cpp_with_the_printed_flags_is_the_same(models: dict[str, Path], method: str) -> None:
    _llama_cpp()
    folder = models[{"yarn:2": "yarn", "linear:2": "linear"}.get(method, "yarn-af")]
    row = verify(folder, "--engine", "llama.cpp", "--gguf", str(models["base.gguf"]), "--serve",
                 f"llama.cpp={flags(models['base.gguf'], method)}")["llama.cpp"]
    assert row["verdict"] == "same" and row["mean_abs_dnll"] <= row["tolerance"], row
    assert set(row["ppl"]) == {"64", "128"}


def test_llama_cpp_on_the_gguf_converted_from_the_llama3_folder_is_the_same(models: dict[str, Path]) -> None:
    _llama_cpp()
    row = verify(models["llama3"], "--engine", "llama.cpp", "--gguf", str(models["llama3.gguf"]))["llama.cpp"]
    assert row["verdict"] == "same", row


def test_a_gguf_whose_rope_disagrees_with_the_folder_differs(models: dict[str, Path]) -> None:
    _llama_cpp()
    row = verify(models["yarn"], "--engine", "llama.cpp", "--gguf", str(models["base.gguf"]))["llama.cpp"]
    assert row["verdict"] == "differs" and row["mean_abs_dnll"] >= FACTOR * row["tolerance"], row


def test_a_serve_line_without_the_attention_factor_differs(models: dict[str, Path]) -> None:
    _llama_cpp()
    line = flags(models["base.gguf"], "yarn:2,attention_factor=1.3")
    dropped = line.split(" --override-kv ")[0] + " -c 128"
    assert "attn_factor" in line and "attn_factor" not in dropped
    row = verify(models["yarn-af"], "--engine", "llama.cpp", "--gguf", str(models["base.gguf"]), "--serve",
                 f"llama.cpp={dropped}")["llama.cpp"]
    assert row["verdict"] == "differs" and row["mean_abs_dnll"] >= FACTOR * row["tolerance"], row


def _vllm(monkeypatch: pytest.MonkeyPatch) -> str:
    if missing():
        pytest.skip(missing())
    if not VLLM_PYTHON.exists():
        pytest.skip(f"no vLLM venv at {VLLM_PYTHON.parent.parent}: run tests/compat/engine_venvs.sh vllm")
    for key, value in VLLM_ENV.items():
        monkeypatch.setenv(key, os.environ.get(key, value))
    return f"vllm={VLLM_PYTHON}"


def test_vllm_from_its_own_venv_is_the_same_on_the_yarn_folder(vllm_models: dict[str, Path],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    row = verify(vllm_models["yarn"], "--engine", "vllm", "--engine-python", _vllm(monkeypatch))["vllm"]
    assert row["verdict"] == "same" and row["mean_abs_dnll"] <= row["tolerance"], row
    assert "--max-model-len 128" in row["serve_line"]


def test_dynamic_ntk_in_vllm_differs_at_a_length_other_than_the_served_one(vllm_models: dict[str, Path],
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    row = verify(vllm_models["dynamic"], "--engine", "vllm", "--engine-python", _vllm(monkeypatch))["vllm"]
    assert row["verdict"] == "differs" and row["mean_abs_dnll"] >= FACTOR * row["tolerance"], row
    # vLLM's one base is transformers' for 128 tokens: the lengths below it (64, and 96 = (64 + 128) / 2, the one
    # verify adds for dynamic) differ, the served maximum does not
    assert set(row["ppl"]) == {"64", "96", "128"} and "of the 128-token forward" not in row["why"], row


def test_a_length_past_what_the_serving_holds_is_not_checked_there(models: dict[str, Path]) -> None:
    """The user's own -c 64 serves no 128-token prompt: that length is "not checked", the shorter one still is."""
    _llama_cpp()
    line = flags(models["base.gguf"], "yarn:2").replace("-c 128", "-c 64")
    row = verify(models["yarn"], "--engine", "llama.cpp", "--gguf", str(models["base.gguf"]), "--serve",
                 f"llama.cpp={line}")["llama.cpp"]
    assert set(row["ppl"]) == {"64"} and row["verdict"] == "same", row
    assert "not checked at 128: 128 tokens are past what this llama.cpp serving holds (-c 64)" in row["why"], row
