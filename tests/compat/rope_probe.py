"""Run in the vLLM or SGLang venv (it never imports ropectl): what the engine's own get_rope builds for Dual Chunk
Attention and for LongRoPE, and which LongRoPE rows its forward reads.

Usage: python rope_probe.py JOBS.json OUT.json. Each job is {"name", "kind": "dca" | "longrope", ...}:
- ``dca``: get_rope(head, max_position, rope section, dual_chunk_attention_config). Both engines' DualChunkRotaryEmbedding
  hard-codes a CUDA device; the call is made once as it stands (its error is the result ``plain_error``), then with the
  device lookup answered and the cache placed on the CPU (``_compute_cos_sin_cache`` wrapped: the same tensors, another
  device), so the class, its arguments and its key table (``cos_sin_k_cache``) can be read.
- ``longrope``: get_rope on a LongRoPE section, then the rotary's own forward on a query whose rotated half is
  [1 .. 1, 0 .. 0], which gives cos and sin per row, for each batch of positions in ``batches``. vLLM reads the
  server's max_model_len from ``get_current_vllm_config()``: ``max_model_len`` answers that.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from job_loop import main

ENGINE = "vllm" if importlib.util.find_spec("vllm") else "sglang"


def _factory() -> types.ModuleType:
    if ENGINE == "vllm":
        import vllm.model_executor.layers.rotary_embedding as module
    else:
        import sglang.srt.layers.rotary_embedding.factory as module
    return module


def _get_rope(job: dict[str, Any], head: int, max_position: int) -> Any:
    import torch

    section, dca = job.get("rope_parameters"), job.get("dual_chunk_attention_config")
    if ENGINE == "vllm":  # its custom ops read the compilation config of the current vLLM config
        from vllm.config import VllmConfig, set_current_vllm_config

        with set_current_vllm_config(VllmConfig()):
            return _factory().get_rope(head, max_position=max_position, is_neox_style=True, rope_parameters=section,
                                       dtype=torch.float32, dual_chunk_attention_config=dca)
    theta = float((section or {}).get("rope_theta", 10000.0))
    scaling = {k: v for k, v in (section or {}).items() if k != "rope_theta"} or None
    return _factory().get_rope(head, head, max_position, theta, True, scaling, torch.float32, 1.0, dca)


@contextmanager
def _on_cpu() -> Iterator[None]:
    """Answer DualChunkRotaryEmbedding's CUDA device lookup and keep its tables on the CPU, inside the block."""
    import torch

    cls = _factory().DualChunkRotaryEmbedding
    saved = cls._compute_cos_sin_cache, torch.cuda.current_device, getattr(torch, "accelerator", None)
    index = saved[2].current_device_index if saved[2] is not None else None

    def compute(self: Any) -> Any:
        self.device = torch.device("cpu")
        return saved[0](self)

    cls._compute_cos_sin_cache = compute
    torch.cuda.current_device = lambda: 0  # SGLang's lookup
    if saved[2] is not None:
        torch.accelerator.current_device_index = lambda: 0  # vLLM's
    try:
        yield
    finally:
        cls._compute_cos_sin_cache, torch.cuda.current_device = saved[0], saved[1]
        if saved[2] is not None:
            torch.accelerator.current_device_index = index


def _clear_cache() -> None:
    """get_rope caches by its arguments: each probe builds its own."""
    cache = getattr(_factory(), "_ROPE_DICT", None)
    if isinstance(cache, dict):
        cache.clear()


def dca(job: dict[str, Any]) -> dict[str, Any]:
    head, max_position = job["head"], job["max_position"]
    out: dict[str, Any] = {}
    try:
        rotary = _get_rope(job, head, max_position)
        out["plain_kind"] = type(rotary).__name__
    except Exception as exc:  # noqa: BLE001 - what the engine raises is the result
        out["plain_error"] = f"{type(exc).__name__}: {exc}"[:500]
    _clear_cache()
    with _on_cpu():
        rotary = _get_rope(job, head, max_position)
    out["kind"] = type(rotary).__name__
    for attr in ("chunk_size", "local_size", "base", "rotary_dim", "max_position_embeddings"):
        if hasattr(rotary, attr):
            out[attr] = float(getattr(rotary, attr)) if attr == "base" else int(getattr(rotary, attr))
    if hasattr(rotary, "cos_sin_k_cache"):
        cache = rotary.cos_sin_k_cache.float()
        half = cache.shape[-1] // 2
        rows = job["positions"]
        out["k_cos"] = cache[rows, :half].tolist()
        out["k_sin"] = cache[rows, half:].tolist()
    _clear_cache()
    return out


def _vllm_max_model_len(n: int) -> None:
    from vllm.model_executor.layers.rotary_embedding import phi3_long_rope_scaled_rope as module

    config = types.SimpleNamespace(model_config=types.SimpleNamespace(max_model_len=n))
    module.get_current_vllm_config = lambda: config


def longrope(job: dict[str, Any]) -> dict[str, Any]:
    import torch

    head, max_position = job["head"], job["max_position"]
    if ENGINE == "vllm":
        _vllm_max_model_len(job["max_model_len"])
    _clear_cache()
    rotary = _get_rope(job, head, max_position)
    out: dict[str, Any] = {"kind": type(rotary).__name__, "use_long_rope": getattr(rotary, "use_long_rope", None),
                           "batches": []}
    half = head // 2
    for positions in job["batches"]:
        pos = torch.tensor(positions, dtype=torch.long)
        query = torch.zeros(len(positions), head)
        query[:, :half] = 1.0
        key = query.clone()
        q, _ = rotary.forward(pos, query, key)
        out["batches"].append({"cos": q[:, :half].tolist(), "sin": q[:, half:].tolist()})
    _clear_cache()
    return out


def run(job: dict[str, Any]) -> dict[str, Any]:
    return {"dca": dca, "longrope": longrope}[job["kind"]](job)


if __name__ == "__main__":
    os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
    if ENGINE == "sglang":  # its kernel modules import triton and torchvision at import time: the runner's stand-ins
        # ropectl/verify/sglang_rotary.py never imports ropectl: imported by its folder, not as ropectl's module
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "ropectl", "verify"))
        from sglang_rotary import STAND_IN_FINDER, prepare_imports

        prepare_imports()
        sys.meta_path.insert(0, STAND_IN_FINDER)
    main(run)
