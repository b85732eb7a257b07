"""Causal attention alone on the CPU: SDPA in fp32 and bf16 at several head dims, and a blocked bf16
matmul + softmax alternative. Shapes are SmolLM2-135M's (9 query heads, 3 KV heads); each variant is
timed in turn within every repeat, best kept, so other jobs' load falls on all of them alike.

    .venv/bin/python bench/bench_attention_cpu.py --length 4096 --repeats 3
"""

from __future__ import annotations

import argparse
import os
import time


def blocked(q, k, v, block: int):
    """Causal GQA attention by query blocks: QK^T and PV as batched matmuls in q's dtype, softmax per row."""
    import torch

    b, h, n, d = q.shape
    kv = k.shape[1]
    qs = (q * d**-0.5).view(b, kv, h // kv, n, d)  # query heads grouped under their KV head: no K/V copies
    out = torch.empty(b, kv, h // kv, n, d, dtype=q.dtype)
    tri = torch.full((block, block), float("-inf"), dtype=q.dtype).triu(1)
    for s in range(0, n, block):
        e = min(s + block, n)
        m = e - s
        scores = torch.matmul(qs[:, :, :, s:e].reshape(b, kv, -1, d), k[:, :, :e].transpose(-1, -2))
        scores = scores.view(b, kv, h // kv, m, e)
        scores[..., s:e] += tri[:m, :m]  # only the diagonal block needs the causal mask
        probs = torch.softmax(scores, -1).view(b, kv, -1, e)
        out[:, :, :, s:e] = torch.matmul(probs, v[:, :, :e]).view(b, kv, h // kv, m, d)
    return out.view(b, h, n, d)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--length", type=int, default=4096)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    import torch
    import torch.nn.functional as F

    n = args.length
    variants = []
    for dim in (32, 64, 128):
        for dt in (torch.float32, torch.bfloat16):
            variants.append((f"sdpa {str(dt)[6:]} head_dim {dim}", dim, dt, None))
    variants += [(f"blocked bf16 head_dim 64 block {b}", 64, torch.bfloat16, b) for b in (256, 1024)]
    torch.manual_seed(0)
    inputs = {}
    for _, dim, dt, _ in variants:
        if (dim, dt) not in inputs:
            q, k, v = torch.randn(1, 9, n, dim), torch.randn(1, 3, n, dim), torch.randn(1, 3, n, dim)
            inputs[dim, dt] = (q.to(dt), k.to(dt), v.to(dt))
    best = {name: float("inf") for name, *_ in variants}
    with torch.inference_mode():
        for _ in range(args.repeats):
            for name, dim, dt, block in variants:
                q, k, v = inputs[dim, dt]
                start = time.perf_counter()
                if block is None:
                    F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
                else:
                    blocked(q, k, v, block)
                best[name] = min(best[name], time.perf_counter() - start)
    print(f"causal attention, 1 layer, {n} tokens; load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for name, dim, *_ in variants:
        useful = 2 * 2 * 9 * dim * n * (n + 1) / 2 / 1e9
        print(f"{name}: {best[name]:.3f} s ({useful / best[name]:.0f} GFLOP/s over the causal triangle)")


if __name__ == "__main__":
    main()
