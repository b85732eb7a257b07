"""The fine-tuned checkpoint in every engine tier: ``ropectl finetune``'s merged folder and its adapter layout's
patched base (OUT/base) are read exactly as ``ropectl patch``'s folder of the same source and method is.

Each tier reuses its own helpers and runners. The fine-tuned weights are a LoRA with seeded random weights, merged
(tests/helpers/finetuned.py), so every log-prob comparison also sees the fine-tune: the merged folder's log-probs in
an engine must equal transformers' on that folder, and differ from the patched (not fine-tuned) folder's.
- transformers 4.43 .. 5.x (tests/compat/runner.py in each cached venv): each version builds the same RoPE from the
  fine-tuned folders as from the patched one, and the cell is what it is for the patched folder (P, or W where
  the write's summary named that version).
- vLLM (newest cached release): the merged folder and OUT/base serve the target with transformers' log-probs.
- llama.cpp's converter: the merged folder converted by convert_hf_to_gguf.py computes transformers' log-probs.
- lm-eval: the merged folder's length is the target and a target-length request is scored whole.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from cases import TRAINED, Case  # noqa: E402
from ropectl_cli import ropectl_json  # noqa: E402
from tier import cell, run_version, versions  # noqa: E402
from venv_runner import run_jobs  # noqa: E402

from tests.helpers import finetuned as ft  # noqa: E402
from tests.helpers.checkpoints import tiny_llama  # noqa: E402
from tests.helpers.eval_data import add_char_tokenizer  # noqa: E402

CACHE = Path(os.environ.get("ROPECTL_COMPAT_CACHE", Path.home() / ".cache" / "ropectl-compat"))
METHODS = ("yarn:4", "linear:4")
FOLDERS = ("patched", "merged", "adapter-base")
_STATE: dict[str, Any] = {}


def _write_all(root: Path, source: Path, method: str) -> tuple[dict[str, Path], tuple[str, ...]]:
    """The patched folder, and the merged and adapter layouts of one fine-tune of the same source and method; with
    the merged write's summary lines."""
    tag = method.replace(":", "")
    patched = root / f"{tag}-patched"
    ropectl_json("patch", str(source), "-m", method, "-o", str(patched))
    merged, _ = ft.write(root / f"{tag}-merged", source, method, "merged")
    adapter, _ = ft.write(root / f"{tag}-adapter", source, method, "adapter")
    assert adapter.base is not None
    return {"patched": patched, "merged": merged.path, "adapter-base": adapter.base}, merged.lines


# transformers 4.43 .. 5.x -------------------------------------------------------------------------------------------

def _case(name: str, folder: Path, lines: tuple[str, ...]) -> Case:
    from ropectl.patch.verify import expected_ropes
    from ropectl.schema.read import read_model_rope

    config = json.loads((folder / "config.json").read_text())
    model = read_model_rope(config)
    warnings = tuple(line for line in lines if not line.startswith("verified") and not line.endswith("same RoPE"))
    return Case(name, "llama", folder, config, expected_ropes(model.rope, model.layer_ropes), warnings)


@pytest.fixture(scope="module")
def tf_cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Case]:
    root = tmp_path_factory.mktemp("ft-tf")
    # the compat tier's llama shape (head_dim = hidden / heads, which every tested release supports)
    source = add_char_tokenizer(tiny_llama(root / "src", hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                           head_dim=16, max_position_embeddings=TRAINED, tie_word_embeddings=True))
    cases = {}
    for method in METHODS:
        written, lines = _write_all(root, source, method)
        for kind, folder in written.items():
            cases[f"{method}/{kind}"] = _case(f"{method}/{kind}", folder, lines)
    return cases


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("version", versions())
def test_transformers_reads_finetuned_as_patched(version: str, method: str, tf_cases: dict[str, Case],
                                                 tmp_path_factory: pytest.TempPathFactory) -> None:
    key = f"tf-{version}"
    if key not in _STATE:
        _STATE[key] = run_version(version, tf_cases, tmp_path_factory.mktemp("ft-jobs"))
    measured = _STATE[key]
    if measured is None:
        pytest.skip(f"no venv for transformers {version}: run tests/compat/tf_venvs.sh (make compat does)")
    patched = tf_cases[f"{method}/patched"]
    want = cell(version, patched, measured.get(str(patched.folder)))
    assert want[0] in ("P", "W"), want
    for kind in ("merged", "adapter-base"):
        case = tf_cases[f"{method}/{kind}"]
        got = measured.get(str(case.folder))
        assert cell(version, case, got)[0] == want[0], (kind, cell(version, case, got))
        assert got["lengths"] == measured[str(patched.folder)]["lengths"], f"{kind}: other RoPE than the patched folder"


# vLLM ----------------------------------------------------------------------------------------------------------------

VLLM = CACHE / "vllm"
VLLM_TRAINED, VLLM_METHOD = 512, "yarn:2"
VLLM_TOL = 1e-3  # as tests/compat/test_vllm.py


def _hf_logprobs(folder: Path, tokens: list[int]) -> list[float]:
    """transformers' log-probs of tokens[1:n-1] from a forward over all n tokens (fp32), as test_vllm's reference."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([tokens])).logits[0].float(), dim=-1)
    return logp[: len(tokens) - 2].gather(1, torch.tensor(tokens[1:-1])[:, None])[:, 0].tolist()


@pytest.fixture(scope="module")
def vllm_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if not (VLLM / "bin" / "python").exists():
        pytest.skip(f"no vLLM venv at {VLLM}: run tests/compat/engine_venvs.sh vllm")
    import random

    root = tmp_path_factory.mktemp("ft-vllm")
    # test_vllm.py's checkpoint: head_dim 32 for vLLM's CPU attention, weights std 0.1 so RoPE moves the log-probs
    source = add_char_tokenizer(tiny_llama(root / "src", seed=7, hidden_size=128, num_attention_heads=4,
                                           num_key_value_heads=2, head_dim=32, intermediate_size=128,
                                           max_position_embeddings=VLLM_TRAINED, initializer_range=0.1))
    folders, _ = _write_all(root, source, VLLM_METHOD)
    tokens = [1] + [random.Random(11 + i).randrange(3, 70) for i in range(2 * VLLM_TRAINED - 1)]
    jobs = [{"name": kind, "model": str(folder), "hf_overrides": {}, "tokens": tokens[:-1]}
            for kind, folder in folders.items()]
    # the adapter layout as vLLM serves it: OUT/base with OUT as a LoRA module (vllm serve OUT/base --enable-lora)
    jobs.append({"name": "adapter-lora", "model": str(folders["adapter-base"]), "lora": str(folders["adapter-base"].parent),
                 "hf_overrides": {}, "tokens": tokens[:-1]})
    env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}
    results = run_jobs(VLLM / "bin" / "python", HERE / "vllm_runner.py", jobs, root, env=env)
    refs = {kind: _hf_logprobs(folder, tokens) for kind, folder in folders.items()}
    refs["adapter-lora"] = _hf_logprobs(folders["adapter-base"].parent, tokens)  # transformers + peft: base + adapter
    return {"results": results, "refs": refs}


@pytest.mark.parametrize("kind", [*FOLDERS, "adapter-lora"])
def test_vllm_serves_finetuned_as_transformers(kind: str, vllm_runs: dict[str, Any]) -> None:
    got = vllm_runs["results"][kind]
    assert "error" not in got, got["error"]
    assert got["derived_max_model_len"] == 2 * VLLM_TRAINED
    ref = vllm_runs["refs"][kind]
    assert None not in got["logprobs"] and len(got["logprobs"]) == len(ref)
    assert max(abs(a - b) for a, b in zip(got["logprobs"], ref)) <= VLLM_TOL


def test_vllm_sees_the_finetune(vllm_runs: dict[str, Any]) -> None:
    """Negative control: the merged folder is not the patched one (the LoRA moves the log-probs), and the adapter's
    base is (the same weights under the same RoPE); the base served with the adapter as a LoRA is the merged one."""
    results = vllm_runs["results"]

    def gap(a: str, b: str) -> float:
        return max(abs(x - y) for x, y in zip(results[a]["logprobs"], results[b]["logprobs"]))

    assert gap("merged", "patched") > 100 * VLLM_TOL and gap("adapter-base", "patched") <= VLLM_TOL
    assert gap("adapter-lora", "merged") <= VLLM_TOL


# llama.cpp's converter -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["merged", "adapter-base"])
def test_llama_cpp_converts_finetuned_as_patched(kind: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    import llama_cpp_convert as conv
    import numpy as np

    why = conv.missing()
    if why:
        pytest.skip(why)
    if "llamacpp" not in _STATE:
        root = tmp_path_factory.mktemp("ft-llamacpp")
        source = root / "src"
        conv.checkpoint(source, conv.FAMILIES["llama"])  # SmolLM2's tokenizer, sharp attention
        _STATE["llamacpp"], _ = _write_all(root, source, "yarn:4")
    folder = _STATE["llamacpp"][kind]
    view = conv.llama_cpp_view(folder)
    assert view["agrees"], view  # what ropectl says of the folder, as of the patched llama-yarn case
    ids = [int(i) for i in np.random.default_rng(0).integers(100, 40000, conv.N_TOKENS)]
    llama = conv.run_llama_cpp(conv.convert(folder), ids)["logprobs"]
    gap = max(abs(a - b) for a, b in zip(llama, conv.transformers_logprobs(folder, ids)))
    assert gap <= conv.SAME_TOL, f"llama.cpp computes other log-probs than transformers for the {kind} folder: {gap}"


# lm-eval -------------------------------------------------------------------------------------------------------------

LMEVAL = CACHE / "lmeval"
LM_TRAINED, LM_TARGET, LM_TOL = 256, 1024, 1e-3  # as tests/compat/test_lm_eval.py


def test_lm_eval_scores_finetuned_whole(tmp_path: Path) -> None:
    if not (LMEVAL / "bin" / "python").exists():
        pytest.skip(f"no lm-eval venv at {LMEVAL}: run tests/compat/engine_venvs.sh lmeval")
    source = add_char_tokenizer(tiny_llama(tmp_path / "src", seed=5, max_position_embeddings=LM_TRAINED))
    folders, _ = _write_all(tmp_path, source, "yarn:4")
    jobs = [{"name": kind, "model_args": f"pretrained={folder}", "tokens": LM_TARGET} for kind, folder in folders.items()]
    results = run_jobs(LMEVAL / "bin" / "python", HERE / "lm_eval_runner.py", jobs, tmp_path)
    for kind in FOLDERS:
        got = results[kind]
        assert "error" not in got, (kind, got["error"])
        assert got["max_length"] == LM_TARGET and got["request_tokens"] == LM_TARGET, (kind, got)
        assert abs(got["loglikelihood"] - got["whole"]) <= LM_TOL, (kind, got)
    # the fine-tune is what lm-eval scored: the merged folder's request differs from the patched one's
    assert abs(results["merged"]["whole"] - results["patched"]["whole"]) > 10 * LM_TOL


def test_written_summary_names_no_engine_the_patch_does_not(tmp_path: Path) -> None:
    """The write's per-engine lines are patch's own reader views of the same config (one home for them)."""
    source = add_char_tokenizer(tiny_llama(tmp_path / "src", max_position_embeddings=TRAINED))
    folders, _ = _write_all(tmp_path, source, "yarn:4")
    patched = ropectl_json("inspect", str(folders["patched"]), "--engines")
    merged = ropectl_json("inspect", str(folders["merged"]), "--engines")
    assert [(v["reader"], v["agrees"]) for v in patched["engines"]] == [(v["reader"], v["agrees"])
                                                                           for v in merged["engines"]]
