"""llama3: Llama 3.1's wavelength bands, with a smooth blend between them."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ropectl.errors import MethodError
from ropectl.rope.formulas import base_inv_freq, factor_of, require
from ropectl.rope.methods.bounds import SearchBound, around, bound
from ropectl.rope.methods.common import ORIGINAL, original
from ropectl.rope.methods.registry import Method, Param
from ropectl.rope.params import Frequencies, RopeParams


def build(base: RopeParams, factor: float, o: Mapping[str, Any]) -> RopeParams:
    trained = original(base, o)
    scaling = {
        "factor": factor,
        "low_freq_factor": float(o.get("low_freq_factor", 1.0)),
        "high_freq_factor": float(o.get("high_freq_factor", 4.0)),
        "original_max_position_embeddings": trained,
    }
    return RopeParams("llama3", base.rope_theta, base.rotary_dim, int(round(trained * factor)), scaling)


def frequencies(p: RopeParams, seq_len: int | None) -> Frequencies:
    sc = p.scaling
    s = factor_of(p)
    lff, hff = float(sc["low_freq_factor"]), float(sc["high_freq_factor"])
    trained = require(p.original_max_position_embeddings, "original_max_position_embeddings", "llama3")
    low_wl, high_wl = trained / lff, trained / hff
    inv = []
    for f in base_inv_freq(p.rope_theta, p.rotary_dim):
        wl = 2 * math.pi / f
        if wl < high_wl:
            inv.append(f)
        elif wl > low_wl or lff == hff:
            # equal bands (Llama 4 ships low = high = 1) leave no blend: a step at original / low, where vLLM and
            # SGLang guard the division by zero (transformers never reaches it: its blend is masked out)
            inv.append(f / s)
        else:
            smooth = (trained / wl - lff) / (hff - lff)
            inv.append((1 - smooth) * f / s + smooth * f)
    return Frequencies(tuple(inv), 1.0, p.rope_theta)


def validate(o: Mapping[str, Any], rotary_dim: int) -> None:
    # Equal bands are a step with no blend: transformers only warns (Llama 4 Scout and Maverick ship 1 and 1), and
    # patch says so (ropectl.patch.core); a high band below the low one has no meaning.
    if o["high_freq_factor"] < o["low_freq_factor"]:
        raise MethodError(f"llama3 needs high_freq_factor >= low_freq_factor, got {o['high_freq_factor']:g} < "
                          f"{o['low_freq_factor']:g}", "e.g. low_freq_factor=1,high_freq_factor=4")


def equal_bands_note(rope: RopeParams, shipped: RopeParams | None) -> str:
    """What equal bands mean, and whose they are ("" unless ``rope`` has them)."""
    sc = rope.scaling
    if rope.rope_type != "llama3" or float(sc.get("low_freq_factor", 0)) != float(sc.get("high_freq_factor", -1)):
        return ""
    band = float(sc["low_freq_factor"])
    own = shipped is not None and shipped.rope_type == "llama3" and float(shipped.scaling.get(
        "low_freq_factor", -1)) == band == float(shipped.scaling.get("high_freq_factor", -1))
    whose = "the model's own bands, carried from its shipped llama3 scaling" if own else "bands given to this patch"
    original = int(rope.original_max_position_embeddings or 0)
    return (f"llama3 with low_freq_factor = high_freq_factor = {band:g} ({whose}): no blended band, a step at "
            f"wavelength {original / band:,.0f} (longer wavelengths divided by the factor, shorter ones kept); "
            "transformers warns that high_freq_factor should exceed low_freq_factor and builds exactly this, "
            "as vLLM and SGLang do")


LOW_FREQ, HIGH_FREQ = 1.0, 4.0  # Meta's values for Llama 3.1


def search_bounds(factor: float) -> tuple[SearchBound, ...]:
    """Low around Meta's 1, high from above low's range to twice Meta's 4: every point keeps low < high."""
    return (around("low_freq_factor", LOW_FREQ, 2, 2, 0.05),
            bound("high_freq_factor", LOW_FREQ * 2 + 0.5, HIGH_FREQ * 2, 0.1,
                  f"above low_freq_factor's range to twice the default {HIGH_FREQ:g}"))


METHOD = Method("llama3", "Llama 3.1: wavelength bands, smooth blend between them", (
    ORIGINAL,
    Param("low_freq_factor", float, LOW_FREQ, "wavelengths above original/low are interpolated"),
    Param("high_freq_factor", float, HIGH_FREQ, "wavelengths below original/high are kept"),
), build, "llama3", frequencies, validate,
    patch_note_for=equal_bands_note,
    gguf_none="llama.cpp bakes llama3 frequencies into a rope_freqs tensor when converting", needs_original=True,
    reextendable=True, carried_options=("low_freq_factor", "high_freq_factor"), search_bounds=search_bounds)
