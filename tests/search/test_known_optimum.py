"""A search whose optimum is known by construction (issue 28's "done when"): SmolLM2 (trained at 8k with theta
100000) rewritten to claim a 1k context and theta / s*^(d/(d-2)). An ntk search for 2k then has its optimum at
factor s*, where theta is the model's own again; with the true theta (the negative control) there is nothing to
gain over the closed forms, and the closed form ships."""

from __future__ import annotations

from pathlib import Path

import pytest

from ropectl.rope.methods import parse_spec
from ropectl.search.output import run_search
from ropectl.search.run import SearchRequest

pytest.importorskip("optuna")
S_STAR, TRAINED, TARGET, HEAD_DIM, THETA = 3.0, 1024, 2048, 64, 100000.0


def shrunk(smollm2: Path, folder: Path, s: float) -> Path:
    from ropectl.patch.gguf import rewrite_gguf

    out = folder / f"smollm2-{s:g}.gguf"
    theta = THETA / s ** (HEAD_DIM / (HEAD_DIM - 2))
    rewrite_gguf(smollm2, out, "llama", {"llama.rope.freq_base": theta, "llama.context_length": TRAINED}, set())
    return out


def search(model: Path, out: Path) -> dict:
    req = SearchRequest(str(model), TARGET, "ntk", out, budget=8, docs=3, held_out=2, samples=0, answer_loss=False,
                        grid=(1.0,), emit="llama.cpp")
    return run_search(req).summary


@pytest.mark.slow
def test_ntk_search_finds_the_factor_that_restores_theta(smollm2: Path, isolated: Path) -> None:
    summary = search(shrunk(smollm2, isolated, S_STAR), isolated / "found")
    found = parse_spec(summary["best"]["found"])
    step = summary["bounds"][0]["step"]
    assert step == 0.5  # a quarter of target / trained
    assert found.name == "ntk" and abs((found.factor or 0) - S_STAR) <= step / 2  # s* on the bounds' grid


@pytest.mark.slow
def test_negative_control_true_theta_finds_no_gain(smollm2: Path, isolated: Path) -> None:
    summary = search(shrunk(smollm2, isolated, 1.0), isolated / "control")
    assert summary["best"]["beats"] is False
    assert summary["best"]["spec"] == summary["best"]["closed_form"]  # the closed form ships
