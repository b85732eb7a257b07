"""PoSE position ids against the paper's sampling (dwzhu-pku/PoSE src/train_pose.py), as distribution properties."""

from __future__ import annotations

import numpy as np
import pytest

from ropectl.finetune.positions import example, sample, span_length

WINDOW, TARGET, SPAN = 16, 64, 80
DRAWS = 4000


@pytest.fixture(scope="module")
def draws() -> list:
    rng = np.random.default_rng(123)
    return [sample(rng, WINDOW, TARGET, SPAN) for _ in range(DRAWS)]


def _uniform_ks(values: list[int], low: int, high: int) -> float:
    """Kolmogorov-Smirnov distance between the draws and the discrete uniform U{low..high}, written here."""
    values = np.sort(np.asarray(values))
    support = np.arange(low, high + 1)
    empirical = np.searchsorted(values, support, side="right") / len(values)
    uniform = (support - low + 1) / (high - low + 1)
    return float(np.abs(empirical - uniform).max())


def test_chunk_one_length_is_uniform_on_1_to_half_window(draws: list) -> None:
    r1 = [d.r1 for d in draws]
    # the reference: randint(1, (L_c + 1) // 2), both ends included
    assert min(r1) == 1 and max(r1) == (WINDOW + 1) // 2
    assert _uniform_ks(r1, 1, (WINDOW + 1) // 2) < 1.63 / np.sqrt(DRAWS)  # KS 1 % critical value


def test_skip_is_uniform_on_0_to_target_minus_window(draws: list) -> None:
    skips = [d.skip for d in draws]
    assert min(skips) == 0 and max(skips) == TARGET - WINDOW
    assert _uniform_ks(skips, 0, TARGET - WINDOW) < 1.63 / np.sqrt(DRAWS)


def test_text_end_of_chunk_two_is_uniform_on_window_to_span(draws: list) -> None:
    r2 = [d.r2 for d in draws]
    assert min(r2) == WINDOW and max(r2) == SPAN
    assert _uniform_ks(r2, WINDOW, SPAN) < 1.63 / np.sqrt(DRAWS)


def test_positions_are_a_window_of_increasing_ids_within_the_target(draws: list) -> None:
    for d in draws[:500]:
        pos = d.position_ids
        assert len(pos) == WINDOW and pos[0] == 0
        assert np.all(np.diff(pos) >= 1)  # strictly increasing
        assert pos[-1] <= TARGET - 1  # span <= target
        gaps = np.flatnonzero(np.diff(pos) > 1)  # one jump at most, between the chunks, of the skip
        assert len(gaps) <= 1 and (not len(gaps) or (gaps[0] + 1 == d.r1 and pos[d.r1] - pos[d.r1 - 1] == d.skip + 1))


def test_largest_relative_distance_reaches_the_target() -> None:
    """Across draws PoSE covers relative distances up to L_t - 1: what makes the target length trained."""
    rng = np.random.default_rng(5)
    spans = [sample(rng, WINDOW, TARGET, SPAN).position_ids for _ in range(DRAWS)]
    assert max(int(p[-1] - p[0]) for p in spans) == TARGET - 1


def test_tokens_are_the_spans_two_chunks_in_text_order() -> None:
    span = np.arange(1000, 1000 + SPAN)
    ids, pos = example(span, np.random.default_rng(0), WINDOW, TARGET)
    assert len(ids) == WINDOW == len(pos)
    assert np.all(np.diff(ids) >= 1)  # text order kept, chunk 2 later in the text
    assert ids[0] == 1000  # chunk 1 starts the span


def test_span_length_follows_the_reference_and_the_target() -> None:
    assert span_length(16, 1000) == 80  # 5 x window
    assert span_length(16, 48) == 48  # never beyond the target
