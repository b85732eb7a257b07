"""Which dtype runs fastest on this CPU: detected, never assumed.

bf16 matmuls are fast only on CPUs with bf16 units (AVX512-BF16 or AMX: oneDNN uses them); elsewhere
they are emulated and about 10x slower than fp32 (measured on an AVX2-only EPYC: 20 vs 187 GFLOP/s).
Linux: the kernel's CPU flags decide at once. Where they cannot be read, a sub-second probe times the
same F.linear in both dtypes; its verdict is cached per CPU and torch version.
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path

from ropectl.output import dumps
from ropectl.runtime.cache import cache_root

BF16_FLAGS = ("avx512_bf16", "amx_bf16")
PROBE_SHAPE = (128, 576, 1536)  # tokens x hidden -> MLP width, SmolLM2-sized
PROBE_MARGIN = 1.2  # bf16 must beat fp32 clearly: "auto" must never be slower than fp32


def cpu_dtype(cpuinfo: str | None = None) -> tuple[str, str]:
    """(dtype, why) for CPU inference."""
    text = read_cpuinfo() if cpuinfo is None else cpuinfo
    flags = cpu_flags(text) if text else None
    if flags is not None:
        return choose_from_flags(flags)
    return probe_cached()


def read_cpuinfo() -> str | None:
    try:
        return Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def cpu_flags(cpuinfo: str) -> set[str] | None:
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):  # x86 / ARM
            return set(value.split())
    return None


def choose_from_flags(flags: set[str]) -> tuple[str, str]:
    found = [f for f in BF16_FLAGS if f in flags]
    if found:
        return "bf16", f"auto: CPU has {'/'.join(found)} (bf16 matmul units)"
    if "bf16" in flags:  # ARMv8.6 BF16 (e.g. Graviton3, Apple M2+ under Linux)
        return "bf16", "auto: CPU has bf16 (ARM BF16 extension)"
    best = next((f for f in ("avx512f", "avx2", "avx") if f in flags), "no AVX")
    return "fp32", f"auto: CPU has no AVX512-BF16/AMX ({best.upper()} only), bf16 would be emulated"


def probe_cached(cache_dir: Path | None = None) -> tuple[str, str]:
    import torch

    key = f"{platform.machine()}|{platform.processor()}|{torch.__version__}|{torch.get_num_threads()}"
    path = (cache_dir or cache_root()) / "cpu-dtype.json"
    try:
        cached = json.loads(path.read_text(encoding="utf-8"))
        if cached.get("key") == key:
            return cached["dtype"], cached["why"] + " (cached)"
    except (OSError, ValueError, KeyError, AttributeError):
        pass
    dtype, why = probe()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dumps({"key": key, "dtype": dtype, "why": why}), encoding="utf-8")
    except OSError:
        pass  # a cache that cannot be written only costs the probe next time
    return dtype, why


def linear_flops(torch_dtype: object, shape: tuple[int, int, int] | None = None) -> float:
    """Best-of-3 FLOP/s of one F.linear of ``shape`` (m, k, n) in ``torch_dtype`` (well under a second on any CPU)."""
    import torch
    import torch.nn.functional as F

    m, k, n = shape or PROBE_SHAPE
    x, w = torch.randn(m, k, dtype=torch_dtype), torch.randn(n, k, dtype=torch_dtype)
    F.linear(x, w)
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        F.linear(x, w)
        best = min(best, time.perf_counter() - start)
    return 2 * m * k * n / best


def probe() -> tuple[str, str]:
    """Best-of-3 timing of one F.linear in fp32 and bf16 (well under a second on any CPU)."""
    import torch

    speed = {name: linear_flops(dt) / 1e9 for name, dt in (("fp32", torch.float32), ("bf16", torch.bfloat16))}
    ratio = speed["bf16"] / speed["fp32"]
    dtype = "bf16" if ratio >= PROBE_MARGIN else "fp32"
    return dtype, f"auto: probe bf16 {speed['bf16']:.0f} vs fp32 {speed['fp32']:.0f} GFLOP/s ({ratio:.2f}x)"


def keep_freed_memory() -> bool:
    """Let glibc keep the memory a CPU forward frees, for the next forward to reuse. By default each activation of
    more than 32 MB is its own mmap, zero-filled page by page when touched and unmapped when freed. On SmolLM2 at
    10k tokens (eval-ppl, one document, fp32, 2-core AVX2 EPYC, one run each) holding freed memory cut 3.4 million
    page faults to 0.47 million, system time from 11.4 s to 2.5 s and the whole process from 88.9 s to 75.9 s, at
    1.2x its peak RSS (1.59 to 1.95 GB); `make demo` went from 10 min 54 s to 9 min 16 s. Process-wide and kept
    for the process's life (a model run is what the process is for); ROPECTL_KEEP_FREED_MEMORY=0 leaves the
    allocator alone. True where both settings took (Linux with glibc); elsewhere nothing changes."""
    import ctypes
    import os

    if os.environ.get("ROPECTL_KEEP_FREED_MEMORY", "1") == "0":
        return False
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(None)  # the process's own C library: no ldconfig lookup
        m_trim_threshold, m_mmap_max = -1, -4  # malloc.h
        # trim first: where the second setting fails, freed memory is still returned as before
        return bool(libc.mallopt(m_trim_threshold, 2**31 - 1)) and bool(libc.mallopt(m_mmap_max, 0))
    except (OSError, AttributeError):
        return False
