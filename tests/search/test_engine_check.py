"""The check of the winner on another engine is ``ropectl verify``'s (``verify.run.judge``; its verdict against
hand-computed differences: tests/verify/test_compare.py): here, the engines chosen by capability and the report's
words for verify's verdicts. The check on vLLM itself: tests/compat/test_search_vllm.py."""

from __future__ import annotations

import pytest

from ropectl.search.engine_check import STATUS, EngineCheck
from ropectl.verify.compare import TOLERANCE


def test_verify_verdicts_are_the_report_words() -> None:
    assert STATUS == {"same": "agrees", "differs": "differs", "not checked": "not checked", "reference": "reference"}
    check = EngineCheck("vllm", STATUS["differs"], "positions 257-512 ...", "the written folder", 2, 3e-3,
                        TOLERANCE["fp32"])
    assert check.line() == "vllm check (the written folder, 2 held-out documents): differs (positions 257-512 ...)"
    assert check.to_dict()["max_nll_diff"] == 3e-3


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
