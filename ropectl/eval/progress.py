"""What a sweep reports to its progress callback after each forward."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Progress:
    """What the progress callback gets after each forward."""

    done_tokens: int
    total_tokens: int
    done_jobs: int
    total_jobs: int
    current: str
