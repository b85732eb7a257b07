"""A search whose optimum is known by construction (issue 28's "done when"): SmolLM2 (trained at 8k with theta
100000) rewritten to claim a 1k context and theta / s*^(d/(d-2)). An ntk search for 2k then has its optimum near
factor s*, where theta is the model's own again; with the true theta (the negative control) there is nothing to
gain over the closed forms, and the closed form ships.

"Near": measured (docs/reference/search.md), PPL at 2k on three plays stays within 0.003 nats from about 0.8 to
1.35 x the trained theta, and where in that band its minimum falls depends on the documents (s = 4 on these, 2.25
for s* = 2.5 at 4k on two others). So the test asks for the band, theta within 2/3 to 4/3 of the truth (two steps
of the space either side), and that the search left the closed-form start when s* is not there."""

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


def search(model: Path, out: Path, held_out: int) -> dict:
    req = SearchRequest(str(model), TARGET, "ntk", out, budget=6, docs=3, held_out=held_out, samples=0,
                        answer_loss=False, grid=(1.0,), emit="llama.cpp")
    return run_search(req).summary


@pytest.mark.slow
@pytest.mark.heavy
def test_ntk_search_finds_the_factor_that_restores_theta(smollm2: Path, isolated: Path) -> None:
    summary = search(shrunk(smollm2, isolated, S_STAR), isolated / "found", held_out=2)
    found = parse_spec(summary["best"]["found"])
    assert summary["bounds"][0]["step"] == 0.5  # a quarter of target / trained
    assert found.name == "ntk" and S_STAR * 2 / 3 <= (found.factor or 0) <= S_STAR * 4 / 3
    assert found.factor != TARGET / TRAINED  # it left the closed form (ntk:2), the first trial


@pytest.mark.slow
@pytest.mark.heavy
def test_negative_control_true_theta_finds_no_gain(smollm2: Path, isolated: Path) -> None:
    summary = search(shrunk(smollm2, isolated, 1.0), isolated / "control", held_out=6)
    assert summary["best"]["beats"] is False
    assert summary["best"]["spec"] == summary["best"]["closed_form"]  # the closed form ships
