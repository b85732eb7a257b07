"""What ``ropectl search`` may vary in a method: each searchable option with stated bounds and a grid step.

A method module declares its own box (``Method.search_bounds``: factor -> bounds), so the search's spaces are
derived from the registry like every other list of methods. Pure data and arithmetic: no optimiser here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

FACTOR = "factor"  # a bound of this name searches the method's factor itself (ntk, whose factor moves theta)


@dataclass(frozen=True)
class SearchBound:
    name: str
    low: float
    high: float
    step: float
    why: str  # where the range comes from, for the report and the docs
    # The closed form's value at this factor where the option's default is a rule, not a number (the search's start).
    start: float | None = None

    def grid(self, value: float) -> float:
        """``value`` on the bound's grid (the resolution a result is reported at)."""
        snapped = self.low + round((value - self.low) / self.step) * self.step
        return round(min(self.high, max(self.low, snapped)), 10)


def bound(name: str, low: float, high: float, step: float, why: str, start: float | None = None) -> SearchBound:
    """A bound whose high end lies on its grid (Optuna would move it there, with a warning)."""
    steps = math.floor((high - low) / step + 1e-9)
    return SearchBound(name, round(low, 6), round(low + steps * step, 6), step, why, start)


def around(name: str, default: float, down: float, up: float, step: float) -> SearchBound:
    """default / down .. default x up: a log-centred range around the option's default."""
    return bound(name, default / down, default * up, step, f"the method's default {default:g} / {down:g} to x {up:g}")
