"""RoPE inverse frequencies written from the formulas (YaRN and Llama 3 papers, /work/shared/reference/rope-config.md).

Independent of ropectl: nothing here imports it, so a test comparing ropectl or transformers against these
lists has an oracle that does not share ropectl's code. Plain Python floats (float64).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def default(theta: float, d: int) -> list[float]:
    return [theta ** (-2 * i / d) for i in range(d // 2)]


def linear(theta: float, d: int, s: float) -> list[float]:
    return [x / s for x in default(theta, d)]


def ntk(theta: float, d: int, s: float) -> list[float]:
    """Static NTK-aware scaling: the base grows to theta * s^(d / (d - 2))."""
    return default(theta * s ** (d / (d - 2)), d)


def yarn_mscale(s: float, m: float = 1.0) -> float:
    return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0


def yarn(theta: float, d: int, s: float, original: int, beta_fast: float = 32, beta_slow: float = 1
         ) -> tuple[list[float], float]:
    """(inv_freq, attention factor) of YaRN with transformers' defaults (truncate: floor / ceil)."""
    def corr(rotations: float) -> float:
        return d * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low = max(math.floor(corr(beta_fast)), 0)
    high = min(math.ceil(corr(beta_slow)), d - 1)
    if low == high:
        high += 0.001
    out = []
    for j, inv in enumerate(default(theta, d)):
        ramp = min(max((j - low) / (high - low), 0.0), 1.0)
        out.append(inv / s * ramp + inv * (1 - ramp))
    return out, yarn_mscale(s)


def llama3(theta: float, d: int, s: float, original: int, low: float = 1.0, high: float = 4.0) -> list[float]:
    out = []
    for inv in default(theta, d):
        wavelength = 2 * math.pi / inv
        if wavelength < original / high:
            out.append(inv)
        elif wavelength > original / low:
            out.append(inv / s)
        else:
            smooth = (original / wavelength - low) / (high - low)
            out.append((1 - smooth) * inv / s + smooth * inv)
    return out


def expected(method: str, theta: float, d: int, s: float, trained: int, options: Mapping[str, Any]
             ) -> tuple[list[float], float]:
    """What a checkpoint patched with ``method`` at factor ``s`` must build at its start (short sequences)."""
    if method in ("none", "dynamic"):  # dynamic starts unscaled and grows only past the trained context
        return default(theta, d), 1.0
    if method == "linear":
        return linear(theta, d, s), 1.0
    if method == "ntk":
        return ntk(theta, d, s), 1.0
    if method == "yarn":
        return yarn(theta, d, s, trained, options.get("beta_fast", 32), options.get("beta_slow", 1))
    if method == "llama3":
        return llama3(theta, d, s, trained, options.get("low_freq_factor", 1.0), options.get("high_freq_factor", 4.0)), 1.0
    raise KeyError(method)


def max_rel_error(got: list[float], want: list[float]) -> float:
    assert len(got) == len(want), (len(got), len(want))
    return max(abs(g - w) / abs(w) for g, w in zip(got, want, strict=True))


def longrope_short(theta: float, d: int, short: list[float], s: float, original: int) -> tuple[list[float], float]:
    """LongRoPE below the original context: each frequency divided by its short factor; attention
    sqrt(1 + ln s / ln L) when s > 1."""
    attention = math.sqrt(1 + math.log(s) / math.log(original)) if s > 1 else 1.0
    return [x / f for x, f in zip(default(theta, d), short, strict=True)], attention
