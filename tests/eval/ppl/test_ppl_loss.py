"""Chunked loss from hidden states equals the model's own loss; windows cover every target once."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ropectl.eval.tasks.ppl.plan import windows
from tests.helpers.eval_data import build
from tests.helpers.eval_reference import load, naive_nll_sum


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("ppl-loss")
    return {
        "llama": load(build("llama", root / "llama")),
        "qwen2": load(build("qwen2", root / "qwen2")),
        # Gemma3 also exercises final logit softcapping in the chunked head.
        "gemma3": load(build("gemma3", root / "gemma3", final_logit_softcapping=5.0)),
    }


@pytest.mark.parametrize("kind", ["llama", "qwen2", "gemma3"])
def test_chunked_equals_naive(models: dict, kind: str) -> None:
    import torch

    from ropectl.eval.engines.hf.loss import sequence_nll

    torch.manual_seed(0)
    ids = torch.randint(0, 100, (300,))
    want = naive_nll_sum(models[kind], ids)
    with torch.inference_mode():
        got = float(sequence_nll(models[kind], ids, chunk_size=64).double().sum())
    assert got == pytest.approx(want, rel=1e-5)


@settings(max_examples=12, deadline=None)
@given(chunk=st.integers(min_value=1, max_value=400))
def test_chunk_size_does_not_change_the_loss(models: dict, chunk: int) -> None:
    import torch

    from ropectl.eval.engines.hf.loss import sequence_nll

    ids = torch.arange(257) % 97
    with torch.inference_mode():
        ref = sequence_nll(models["llama"], ids, chunk_size=1024)
        got = sequence_nll(models["llama"], ids, chunk_size=chunk)
    assert got.shape == (256,)
    torch.testing.assert_close(got, ref, rtol=1e-6, atol=1e-6)


def test_score_from_scores_only_the_tail(models: dict) -> None:
    import torch

    from ropectl.eval.engines.hf.loss import sequence_nll

    ids = torch.arange(120) % 50
    with torch.inference_mode():
        full = sequence_nll(models["llama"], ids)
        tail = sequence_nll(models["llama"], ids, score_from=70)
    torch.testing.assert_close(tail, full[70:])


@settings(max_examples=200, deadline=None)
@given(n=st.integers(2, 3000), length=st.integers(2, 600), stride_frac=st.floats(0.01, 1.0))
def test_sliding_windows_score_each_target_once(n: int, length: int, stride_frac: float) -> None:
    if length > n:
        return
    stride = min(max(1, int(length * stride_frac)), length - 1)
    scored: list[int] = []
    for start, first in windows(n, length, stride):
        assert 0 <= start and start + length <= n  # every window is full length
        assert start < first <= start + length
        scored += range(first, start + length)
    assert scored == list(range(1, n))  # targets 1..n-1, each once, in order
