"""What a set of frequencies means against a context length: wavelengths and rotation counts."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class PairReport:
    """One dimension pair (2i, 2i+1 interleaved; i, i+d/2 half-split) of the rotary part."""

    index: int
    base_wavelength: float
    wavelength: float
    rotations_in_trained: float  # full turns within the trained context, with the base frequency

    @property
    def rotates_in_trained(self) -> bool:
        return self.rotations_in_trained >= 1.0


def wavelengths(inv_freq: Sequence[float]) -> list[float]:
    # p-RoPE's unrotated pairs have frequency 0: an infinite wavelength.
    return [2 * math.pi / f if f else math.inf for f in inv_freq]


def pair_reports(base_inv: Sequence[float], inv: Sequence[float], trained: int) -> list[PairReport]:
    """Base and effective wavelength per pair, and how many turns each base pair makes in ``trained``."""
    return [
        PairReport(i, wb, w, trained / wb)
        for i, (wb, w) in enumerate(zip(wavelengths(base_inv), wavelengths(inv)))
    ]


def first_non_rotating(reports: Sequence[PairReport]) -> int | None:
    """Index of the first pair that never completes a turn in the trained context (None: all do)."""
    return next((r.index for r in reports if not r.rotates_in_trained), None)
