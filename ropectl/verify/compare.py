"""One engine against transformers on the same token ids: |ΔNLL| per token by position band, and the verdict.

The tolerance (docs/reference/verify.md): an allowance for the dtype both engines compute in, plus, for an engine
whose weights may be quantized (``Engine.quantized_weights``: llama.cpp's GGUF), its own floor times
(1 + ``FLOOR_MARGIN``). The floor is measured, not assumed: the same engine and transformers on the unpatched
model (its unscaled RoPE) inside the trained window, on the same ids, where any difference is the file's and the
kernels', never the RoPE's. The verdict compares the largest band mean of |ΔNLL| with it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ropectl.verify.spec import DIFFERS, SAME, Band

# Mean |ΔNLL| per token (nats). fp32: transformers and vLLM agree to ~1e-7 per token on the tiers' tiny models
# (tests/compat/test_vllm_engine.py: at most 1.6e-7), so 1e-4 leaves room for longer documents and deeper models;
# half precision rounds every activation in kernels that differ between engines (1.8e-3 measured in bf16 on the
# same tiny model), so a bf16 check catches a wrong RoPE only where it moves the PPL by whole percents.
TOLERANCE = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 2e-2}
FLOOR_MARGIN = 0.5  # a patched model may drift past the unpatched floor by half of it (quantization error grows)


def allowance(dtype: str) -> float:
    return TOLERANCE.get(dtype, TOLERANCE["bf16"])


def tolerance(dtype: str, floor: float | None) -> float:
    """The dtype's allowance, plus the engine's measured floor and its margin where it has one."""
    return allowance(dtype) + (floor * (1 + FLOOR_MARGIN) if floor else 0.0)


def deltas(got: Sequence[Any], reference: Sequence[Any]) -> list[list[float]]:
    """Per document, |ΔNLL| of each token (the NLL of token k + 1, k = 0...)."""
    out = []
    for a, b in zip(got, reference, strict=True):
        n = min(len(a), len(b))
        out.append([abs(float(x) - float(y)) for x, y in zip(a[:n], b[:n])])
    return out


def band_edges(lengths: Sequence[int]) -> list[tuple[int, int]]:
    """(first, last] position bands between the lengths scored: (0, L1], (L1, L2], ..."""
    edges, first = [], 0
    for length in sorted(set(lengths)):
        edges.append((first, length))
        first = length
    return edges


def bands(per_length: Mapping[int, list[list[float]]], lengths: Sequence[int]) -> tuple[Band, ...]:
    """Mean and max |ΔNLL| per band, over every forward that reaches it (a target position p is token p of a
    sequence: delta index p - 1)."""
    out = []
    for first, last in band_edges(lengths):
        values = [d for docs in per_length.values() for doc in docs for d in doc[max(0, first - 1):last - 1]]
        if values:
            out.append(Band(first=first, last=last, mean=math.fsum(values) / len(values), max=max(values),
                            tokens=len(values)))
    return tuple(out)


def worst(per_length: Mapping[int, list[list[float]]], lengths: Sequence[int]) -> tuple[float, int, Band | None]:
    """(largest band mean, the length whose forward has it, the band): per length, so a rule that bites at one
    length only (dynamic at a length other than the served one) is not averaged away by the others."""
    best: tuple[float, int, Band | None] = (0.0, 0, None)
    for length, docs in per_length.items():
        for band in bands({length: docs}, lengths):
            if band.mean > best[0]:
                best = (band.mean, length, band)
    return best


def verdict(per_length: Mapping[int, list[list[float]]], lengths: Sequence[int], tol: float,
            ) -> tuple[str, str, float, float]:
    """(verdict, why, largest band mean, largest |ΔNLL| of any token)."""
    mean, length, band = worst(per_length, lengths)
    top = max((d for docs in per_length.values() for doc in docs for d in doc), default=0.0)
    if band is None or mean <= tol:
        return SAME, f"largest band mean |ΔNLL| {mean:.2e} within {tol:.2e} (max per token {top:.2e})", mean, top
    return DIFFERS, (f"positions {band.first + 1}-{band.last} of the {length}-token forward: mean |ΔNLL| "
                     f"{band.mean:.2e}, {band.mean / tol:.0f}x the tolerance {tol:.2e} (max per token "
                     f"{band.max:.2e})"), mean, top


def ppl(nlls: Sequence[Any]) -> float:
    """exp of the token-weighted mean NLL over the documents."""
    total = math.fsum(float(x) for doc in nlls for x in doc)
    count = sum(len(doc) for doc in nlls)
    return math.exp(total / count) if count else math.nan
