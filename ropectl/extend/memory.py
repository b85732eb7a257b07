"""Peak memory of each stage at a length, and the longest length this device holds for it.

Evaluation (zero-shot, search, acceptance, engines): the weights, the KV cache of one sequence (keys and values of
every layer), one layer's activations and one 1k-token chunk of logits in fp32; attention is SDPA's, whose CPU and
GPU kernels do not hold the n x n scores. Fine-tuning: finetune's own estimate (``finetune.plan.memory_bytes``:
fp32 master weights, gradients, AdamW's two moments, the checkpointed layer inputs, one layer recomputed, one loss
chunk) at PoSE's window, which is what it trains at; the target only enters through the position ids. Both are
estimates to plan with (finetune states about +-50 %), not bounds.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

LOGIT_CHUNK = 1024


def dtype_bytes(dtype: str) -> int:
    return 2 if dtype in ("bf16", "fp16", "bfloat16", "float16") else 4


def eval_bytes(config: Mapping[str, Any], n: int, dtype: str) -> int:
    from ropectl.finetune.plan import shape_of

    shape, b = shape_of(config), dtype_bytes(dtype)
    c = dict(config.get("text_config") or config)
    heads = int(c["num_attention_heads"])
    head_dim = int(c.get("head_dim") or shape.hidden // heads)
    kv = int(c.get("num_key_value_heads") or heads) * head_dim
    cache = 2 * shape.layers * kv * n * b
    layer = n * (4 * shape.hidden + 3 * shape.intermediate) * b
    return shape.params * b + cache + layer + min(n, LOGIT_CHUNK) * shape.vocab * 4


def train_bytes(config: Mapping[str, Any], window: int, dtype: str) -> int:
    from ropectl.finetune.loss import DEFAULT_CHUNK
    from ropectl.finetune.plan import memory_bytes, shape_of

    shape = shape_of(config)
    return memory_bytes(shape, window, 1, shape.params, dtype == "bf16", DEFAULT_CHUNK)


def available_bytes(device: str) -> int:
    """What this device can give the run now: free GPU memory, or the host's available memory."""
    if device.startswith("cuda"):
        import torch

        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return int(free)
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            info = {line.split(":")[0]: line.split()[1] for line in f}
        return int(info["MemAvailable"]) * 1024
    except (OSError, KeyError, ValueError, IndexError):
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))


def longest(fits: Callable[[int], bool], upper: int) -> int:
    """The longest length (a multiple of 64, at most ``upper``) for which ``fits`` holds; 0 when none does."""
    lo, hi = 0, upper // 64
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid * 64):
            lo = mid
        else:
            hi = mid - 1
    return lo * 64
