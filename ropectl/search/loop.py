"""What drives a search's trials, as the user asked for it: the settings every kind of space reads its own from."""

from __future__ import annotations

from dataclasses import dataclass

# The options that size or drive the loop, by the settings field each sets: every space takes some of them and
# refuses the others (``ropectl.search.spaces.check_loop``).
LOOP_OPTIONS = {"--trials": "trials", "--sampler": "sampler", "--population": "population",
                "--iterations": "iterations"}


@dataclass(frozen=True, kw_only=True)
class LoopSettings:
    """None: not given, the space's default."""

    trials: int | None = None
    minutes: float | None = None
    sampler: str | None = None
    population: int | None = None
    iterations: int | None = None
    seed: int = 0
    shared: bool = False  # the study is in --storage, where workers may share it
