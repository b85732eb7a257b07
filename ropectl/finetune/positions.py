"""PoSE position ids: train in the original window with positions that span the target context.

Positional Skip-wisE training (Zhu et al. 2023, arXiv 2309.10400; dwzhu-pku/PoSE ``src/train_pose.py``,
``train_preprocess_function_pose``), as that code samples, with ``L_c`` the training window and ``L_t`` the target:

- the source text is a span of a document up to 5 x L_c tokens (the reference truncates to ``5 * L_c``);
- chunk 1 is the span's first ``r1`` tokens, ``r1 ~ U{1, ..., floor((L_c + 1) / 2)}`` (``randint`` is inclusive);
- chunk 2 is the ``L_c - r1`` tokens ending at ``r2 ~ U{L_c, ..., len(span)}``: later text, so the text skips too;
- positions: chunk 1 keeps ``0 .. r1 - 1``; chunk 2 gets ``r1 .. L_c - 1`` plus a skip ``u ~ U{0, ..., L_t - L_c}``
  (the reference's ``lt = 0`` revision: chunk 1 always starts at 0, "more uniform coverage of large relative
  positions"), so the last position is at most ``L_t - 1``.

Two chunks only, as the reference and axolotl do. Pure functions of a numpy Generator: the trainer seeds one per
example, so a resumed run draws what an uninterrupted one would.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SPAN_FACTOR = 5  # the reference tokenizes documents to at most 5 x the window for chunk 2 to be drawn from


@dataclass(frozen=True)
class PoseSample:
    """One PoSE example: which span tokens are kept (``[0, r1)`` and ``[r2 - (window - r1), r2)``) and their skip."""

    r1: int
    r2: int
    skip: int
    window: int

    @property
    def token_index(self) -> Any:
        """Indices into the span of the window's tokens, in order."""
        import numpy as np

        second = self.window - self.r1
        return np.concatenate([np.arange(self.r1), np.arange(self.r2 - second, self.r2)]).astype(np.int64)

    @property
    def position_ids(self) -> Any:
        """0..r1-1, then r1..window-1 shifted by ``skip``."""
        import numpy as np

        pos = np.arange(self.window, dtype=np.int64)
        pos[self.r1:] += self.skip
        return pos


def span_length(window: int, target: int) -> int:
    """Tokens of text one PoSE example is drawn from: 5 x the window, as the reference, never past the target."""
    return max(window, min(SPAN_FACTOR * window, target))


def sample(rng: Any, window: int, target: int, span: int) -> PoseSample:
    """One draw of the reference's sampling for a span of ``span`` >= ``window`` tokens."""
    if not 1 < window <= span or target < window:
        raise ValueError(f"PoSE needs 1 < window <= span and target >= window (window {window}, span {span}, "
                         f"target {target})")
    r1 = int(rng.integers(1, (window + 1) // 2 + 1))  # randint(1, (L_c + 1) // 2), both ends included
    r2 = int(rng.integers(window, span + 1))  # randint(L_c, len_input)
    skip = int(rng.integers(0, target - window + 1))  # randint(0, L_t - L_c)
    return PoseSample(r1, r2, skip, window)


def example(span_tokens: Any, rng: Any, window: int, target: int) -> tuple[Any, Any]:
    """(input_ids, position_ids) of one PoSE example from ``span_tokens`` (1-D numpy ints)."""
    drawn = sample(rng, window, target, len(span_tokens))
    return span_tokens[drawn.token_index], drawn.position_ids
