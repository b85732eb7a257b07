"""Packing and the held-out split, on hand-made token documents (no model)."""

from __future__ import annotations

import numpy as np
import pytest

from ropectl.errors import DataError
from ropectl.finetune.data import PackedExamples, bookend, split
from tests.helpers.token_docs import Doc, token_docs

BOS, EOS = 1, 2


def _docs(lengths: list[int]) -> list[Doc]:
    return token_docs(lengths)


def test_bookend_adds_only_what_is_missing() -> None:
    assert bookend([5, 6], BOS, EOS).tolist() == [1, 5, 6, 2]
    assert bookend([1, 5, 2], BOS, EOS).tolist() == [1, 5, 2]
    assert bookend([5], None, EOS).tolist() == [5, 2]


def test_split_packs_everything_but_the_held_out_into_equal_spans() -> None:
    docs = _docs([30, 100, 50, 120, 40])
    parts = split(docs, span=16, held_out=2, eval_length=90, seed=0, bos=BOS, eos=EOS)
    assert sorted(parts.held_out_ids) == ["d1", "d3"]  # the two long enough to score at 90 tokens
    assert all(len(s) == 16 for s in parts.spans)
    packed = np.concatenate(parts.spans)
    assert not np.isin(packed, [11, 13]).any()  # held-out documents never trained on
    # every training document is there, bookended: its tokens + BOS + EOS, minus the tail cut off the last span
    assert parts.train_tokens == (30 + 2) + (50 + 2) + (40 + 2)
    assert len(parts.spans) == parts.train_tokens // 16


def test_named_held_out_and_too_little_data() -> None:
    docs = _docs([30, 100, 50])
    assert split(docs, 16, 0, 90, 0, BOS, EOS, names=["d0"]).held_out_ids == ["d0"]
    with pytest.raises(DataError, match="no document 'd9'"):
        split(docs, 16, 0, 90, 0, BOS, EOS, names=["d9"])
    with pytest.raises(DataError, match="fewer than one 500-token"):
        split(docs, 500, 1, 90, 0, BOS, EOS)


def test_example_j_is_a_function_of_seed_and_j() -> None:
    spans = [np.arange(i * 100, i * 100 + 80) for i in range(5)]
    a = PackedExamples(spans, 12, seed=3, window=16, target=64, pose=True)
    b = PackedExamples(spans, 12, seed=3, window=16, target=64, pose=True)
    for j in (11, 0, 7):  # any order: a resumed or sharded reader gets the same example
        assert all(np.array_equal(a[j][k], b[j][k]) for k in ("input_ids", "position_ids"))
    first, second = {a.span_index(j) for j in range(5)}, {a.span_index(j) for j in range(5, 10)}
    assert first == second == set(range(5))  # each pass over the data uses every span once
    assert [a.span_index(j) for j in range(5)] != [a.span_index(j) for j in range(5, 10)]  # in a new order
