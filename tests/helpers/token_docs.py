"""Hand-made token documents for the packing tests: document i is made of the token 10 + i only, so every packed
token says which document it came from."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Doc:
    doc_id: str
    tokens: np.ndarray


def token_docs(lengths: list[int]) -> list[Doc]:
    return [Doc(f"d{i}", np.full(n, 10 + i)) for i, n in enumerate(lengths)]
