"""The check of the winner on another engine (``ropectl.search.engine_check.compare``) against hand-computed
per-document differences: within the dtype's tolerance it agrees, beyond it (a RoPE that moves the PPL) it differs,
other token counts fail. The check on vLLM itself: tests/compat/test_search_vllm.py."""

from __future__ import annotations

import math

import pytest

from ropectl.search.engine_check import TOLERANCE, compare
from ropectl.search.fitness import Measured

TRAINED, TARGET = 256, 512
TOKENS = {TRAINED: [255, 255], TARGET: [511, 511]}


def measured(per_token: dict[int, list[float]], tokens: dict[int, list[int]] = TOKENS) -> Measured:
    """Per length and document, the mean NLL per token given; the sums are that times the tokens."""
    return Measured("x", True, {n: [v * t for v, t in zip(per_token[n], tokens[n])] for n in per_token},
                    {n: list(tokens[n]) for n in per_token})


REFERENCE = measured({TRAINED: [2.0, 2.5], TARGET: [3.0, 3.5]})


def test_within_the_tolerance_it_agrees() -> None:
    got = measured({TRAINED: [2.0, 2.5 + 3e-5], TARGET: [3.0 - 5e-5, 3.5]})
    check = compare("vllm", got, REFERENCE, "the written folder", "fp32", TARGET, 1.0)
    assert check.status == "agrees" and check.tolerance == TOLERANCE["fp32"]
    assert check.max_diff == pytest.approx(5e-5, rel=1e-6)
    # the PPL of each engine at the target: exp of the token-weighted mean NLL
    assert check.ppl["transformers"] == pytest.approx(math.exp(3.25), rel=1e-12)
    assert check.ppl["vllm"] == pytest.approx(math.exp(3.25 - 2.5e-5), rel=1e-12)


def test_a_difference_beyond_the_tolerance_is_flagged() -> None:
    got = measured({TRAINED: [2.0, 2.5], TARGET: [3.0, 3.5 + 0.03]})  # only at the target, one document
    for dtype, status in (("fp32", "differs"), ("bf16", "differs")):
        check = compare("vllm", got, REFERENCE, "the written folder", dtype, TARGET, 1.0)
        assert check.status == status and check.max_diff == pytest.approx(0.03, rel=1e-6)
        assert "beyond" in check.line()


def test_other_token_counts_fail() -> None:
    got = measured({TRAINED: [2.0, 2.5], TARGET: [3.0, 3.5]}, {TRAINED: [255, 255], TARGET: [511, 510]})
    check = compare("vllm", got, REFERENCE, "the written folder", "fp32", TARGET, 1.0)
    assert check.status == "failed" and "tokens" in check.why


def test_the_check_engines_are_chosen_by_capability(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every registered engine whose method switch is not cheap checks the winner (it never runs trials); one that
    switches cheaply, as the trials' engine does, does not: two stand-ins that differ only in that capability."""
    from ropectl.eval.engines import ENGINES, Engine
    from ropectl.search.engine_check import check_engines

    restarting = type("Restarting", (Engine,), {"cheap_method_switch": False})
    switching = type("Switching", (Engine,), {"cheap_method_switch": True})
    monkeypatch.setitem(ENGINES, "restarting-stand-in", restarting)
    monkeypatch.setitem(ENGINES, "switching-stand-in", switching)
    chosen = check_engines()
    assert "restarting-stand-in" in chosen and "switching-stand-in" not in chosen
    assert "vllm" in chosen and "transformers" not in chosen  # vLLM starts a new engine per RoPE; transformers not
