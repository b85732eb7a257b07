"""Sweeps inside ``reusing()`` share one load of the model, and still score each method as a fresh load does."""

from __future__ import annotations

from pathlib import Path

import pytest

from ropectl.eval.tasks.ppl import build_spec, run_eval
from ropectl.runtime.load import load_model
from ropectl.runtime.model import load_tokenizer, model_source
from ropectl.runtime.reuse import reusing


def _spec(model: Path, corpus: Path, out: Path, methods: list[str]):
    return build_spec(dtype="fp32", model=str(model), dataset=str(corpus), methods=methods, lengths="64,128",
                      docs=2, out=out, cache_dir=out.parent / "cache")


def test_shared_model_scores_like_a_fresh_load(tiny_model: Path, tiny_corpus: Path, tmp_path: Path) -> None:
    """The second sweep starts with the first one's last method (linear:4) still in the shared model: its `none`
    must equal a fresh process-level load's `none`, cell by cell (the oracle: a run outside ``reusing``)."""
    fresh = run_eval(_spec(tiny_model, tiny_corpus, tmp_path / "fresh", ["none"]))
    with reusing():
        run_eval(_spec(tiny_model, tiny_corpus, tmp_path / "a", ["none", "linear:4"]))
        again = run_eval(_spec(tiny_model, tiny_corpus, tmp_path / "b", ["none"]))
    expected = {c.key: c.nll_sum for c in fresh.cells}
    assert expected and {c.key for c in again.cells} == set(expected)
    assert all(c.nll_sum == pytest.approx(expected[c.key], rel=1e-6) for c in again.cells)
    linear = {c.key: c.nll_sum for c in run_eval(_spec(tiny_model, tiny_corpus, tmp_path / "c", ["linear:4"])).cells}
    assert any(abs(linear[("linear:4", *k[1:])] - v) > 1e-3 for k, v in expected.items())  # control: it differs


def test_loads_are_shared_only_inside(tiny_model: Path) -> None:
    source = model_source(str(tiny_model))
    tok = load_tokenizer(source.path, source.kwargs)
    with reusing():
        first = load_model(source.path, source.kwargs, tok, "cpu", "fp32")
        assert load_model(source.path, source.kwargs, tok, "cpu", "fp32") is first
        assert model_source(str(tiny_model)) is model_source(str(tiny_model))
        assert load_model(source.path, source.kwargs, tok, "cpu", "bf16") is not first  # another dtype: its own
    assert load_model(source.path, source.kwargs, tok, "cpu", "fp32") is not first  # control: outside, fresh
    assert model_source(str(tiny_model)) is not model_source(str(tiny_model))
