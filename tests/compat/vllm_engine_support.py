"""What the vLLM engine tier (test_vllm_engine.py) shares: ropectl run in either venv, its cells read back and
compared, and the tiny checkpoints beyond the Llama: a full composite Qwen2-VL and a LongRoPE Phi-3."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.compat.vllm_families import PHI35_LONG, PHI35_SHORT  # noqa: E402
from tests.helpers.eval_data import add_char_tokenizer  # noqa: E402

CACHE = Path(os.environ.get("ROPECTL_COMPAT_CACHE", Path.home() / ".cache" / "ropectl-compat"))
VENV = CACHE / "vllm"
VLLM_PYTHON = str(VENV / "bin" / "python")
ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1",
       "TRANSFORMERS_OFFLINE": "1", "PYTHONWARNINGS": "ignore"}
# vLLM's multimodal model files import transformers' image processors, which import torchvision; the venv has none
# (its PyPI wheels are CUDA builds that break the CPU torch), so the family tier's import-only stand-in takes its
# place (raising if called: text-only scoring never calls it)
STAND_IN = {"PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests' / 'compat' / 'stand_in'}"}


def ropectl(python: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = {**os.environ, **ENV, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([python, "-m", "ropectl", *args], capture_output=True, text=True, env=full, timeout=1800)


def eval_ppl(python: str, model: Path, corpus: Path, out: Path, methods: tuple[str, ...], *extra: str,
             env: dict[str, str] | None = None) -> dict[str, Any]:
    """`eval-ppl --json` in fp32; its result with the cells, keyed (method, length, document)."""
    args = ["eval-ppl", str(model), "-d", str(corpus), "--dtype", "fp32", "-o", str(out), "--json"]
    for m in methods:
        args += ["-m", m]
    proc = ropectl(python, *args, *extra, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    with open(Path(result["out"]) / "results.csv") as fh:
        result["cells"] = {(r["method"], int(r["length"]), r["doc"]): r for r in csv.DictReader(fh)}
    return result


def refused(*args: str, env: dict[str, str] | None = None) -> str:
    """ropectl in the vLLM venv stops with one `error: ... Fix: ...` line; that line."""
    proc = ropectl(VLLM_PYTHON, *args, env=env)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1 and lines[0].startswith("error: ") and "Fix:" in lines[0], \
        proc.stderr[-2000:]
    return lines[0]


def per_token(a: dict[str, str], b: dict[str, str]) -> float:
    assert a["tokens"] == b["tokens"]
    return abs(float(a["nll_sum"]) - float(b["nll_sum"])) / int(a["tokens"])


def compare(got: dict[str, Any], ref: dict[str, Any], method: str) -> float:
    keys = [k for k in got["cells"] if k[0] == method]  # the reference may hold more lengths
    assert keys and set(keys) <= set(ref["cells"])
    worst = max(per_token(got["cells"][k], ref["cells"][k]) for k in keys)
    print(f"{method}: {len(keys)} cells, max |mean NLL diff| {worst:.2e} per token")
    return worst


def tiny_qwen2_vl(folder: Path) -> Path:
    """The full composite Qwen2-VL (vision tower, text_config): head_dim 32 (hidden 64, 2 heads) for vLLM's CPU
    attention, mrope_section [4, 6, 6] over its 16 frequencies, theta 1e4 (1e6 barely moves 512 tokens: ntk:2 by
    1.3e-4 nats per token), trained length 256, weights std 0.1."""
    from tests.helpers.family_checkpoints import tiny_qwen2_vl_text

    model = tiny_qwen2_vl_text(folder, hidden_size=64, intermediate_size=64, num_attention_heads=2,
                               num_key_value_heads=1, initializer_range=0.1, bos_token_id=1, eos_token_id=2,
                               rope_parameters={"rope_type": "default", "rope_theta": 1e4, "mrope_section": [4, 6, 6]},
                               vision={"hidden_size": 64})
    return add_char_tokenizer(model)


def tiny_phi3_longrope(folder: Path) -> Path:
    """Phi-3 as Phi-3.5-mini ships its RoPE: longrope with Phi-3.5's short/long factors (16 for a 32-dim head),
    original_max_position_embeddings 128 at the top level, max_position_embeddings 512 (x4), weights std 0.1."""
    from tests.helpers.checkpoints import tiny_phi3

    model = tiny_phi3(folder, hidden_size=64, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1,
                      max_position_embeddings=512, original_max_position_embeddings=128, initializer_range=0.1,
                      bos_token_id=1, eos_token_id=2,
                      rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": PHI35_SHORT,
                                       "long_factor": PHI35_LONG})
    return add_char_tokenizer(model)
