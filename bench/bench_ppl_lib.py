"""bench_ppl.py's matmul peak and its tables: every row against naive fp32, and what --dtype auto gives here."""

from __future__ import annotations

import time


def table(rows: list[dict], peaks: dict[str, float], device: str, peak_tflops: float | None = None) -> str:
    def naive_of(r: dict) -> str:
        return "naive-sweep" if r["impl"].endswith("-sweep") else "naive"

    ref = {(naive_of(r), r["length"]): r for r in rows if r["impl"] in ("naive", "naive-sweep")
           and r["dtype"] == "fp32" and "error" not in r}
    out = [f"device: {device}; matmul peak: " + ", ".join(f"{k} {v:,.0f} GFLOP/s" for k, v in peaks.items()), "",
           "| dtype | length | impl | tokens/s | × naive fp32 | peak MiB | peak ÷ naive | MFU |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['dtype']} | {r['length']} | {r['impl']} | {r['error']} | | | | |")
            continue
        base = ref.get((naive_of(r), r["length"]))
        same = next((x for x in rows if x["impl"] == naive_of(r) and x["dtype"] == r["dtype"]
                     and x["length"] == r["length"] and "error" not in x), None)
        speedup = f"{r['tok_s'] / base['tok_s']:.2f}×" if base else "–"
        mem = f"{r['peak_mib'] / same['peak_mib']:.2f}" if same else "–"
        # A dtype slower than fp32 (bf16 on CPUs without bf16 units) is emulated: the machine's peak is fp32's.
        peak = peak_tflops * 1e3 if peak_tflops else max(peaks[r["dtype"]], peaks.get("fp32", 0.0))
        mfu = r["flops"] / r["seconds"] / 1e9 / peak
        out.append(f"| {r['dtype']} | {r['length']} | {r['impl']} | {r['tok_s']:,.0f} | {speedup} | "
                   f"{r['peak_mib']:,.0f} | {mem} | {mfu:.1%} |")
    return "\n".join(out)


def auto_line(rows: list[dict], auto: str) -> str:
    """What --dtype auto with eval-ppl's evaluator gives on this machine, against naive fp32, per length."""
    ok = [r for r in rows if "error" not in r]
    out = []
    for r in (r for r in ok if r["impl"] == "chunked" and r["dtype"] == auto):
        base = next((b for b in ok if b["impl"] == "naive" and b["dtype"] == "fp32" and b["length"] == r["length"]), None)
        if base:
            out.append(f"{r['length']}: {r['tok_s'] / base['tok_s']:.2f}x naive fp32 tokens/s at "
                       f"{r['peak_mib'] / base['peak_mib']:.2f}x its peak memory")
    return f"auto ({auto}) chunked: " + ("; ".join(out) if out else "not measured (needs fp32 naive and auto chunked)")


def matmul_peak(dtype: str, device: str) -> float:
    """The machine's practical matmul peak for this dtype: best GFLOP/s over a large square product and
    the model's own MLP shape through F.linear (on CPUs without bf16 units the two kernels differ 30x)."""
    import torch
    import torch.nn.functional as F

    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    cuda = device.startswith("cuda")
    n = 8192 if cuda else (2048 if dtype == "fp32" else 512)
    shapes = [(n, n, n), (8192 if cuda else 4096, 576, 1536)]
    best = 0.0
    for m, k, out in shapes:
        x = torch.randn(m, k, dtype=torch_dtype, device=device)
        w = torch.randn(out, k, dtype=torch_dtype, device=device)
        for _ in range(4):  # best of several: other jobs share this machine's cores
            F.linear(x, w)
            if cuda:
                torch.cuda.synchronize()
            start = time.perf_counter()
            F.linear(x, w)
            if cuda:
                torch.cuda.synchronize()
            best = max(best, 2 * m * k * out / (time.perf_counter() - start) / 1e9)
    return best
