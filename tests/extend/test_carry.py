"""What extend carries on from zero-shot, on hand-written recommend records: the winner where it scales, else the
best-ranked eligible method that scales; and *reached* judged on what is carried (Wilson's lower bound, computed
here by hand)."""

from __future__ import annotations

from ropectl.extend.stages import carry


def row(method: str, score: float | None, trials: int, eligible: bool = True, regression: float = 0.0) -> dict:
    return {"method": method, "score": score, "trials": trials, "eligible": eligible, "regression": regression}


def zero(*evidence: dict, ships: str | None = None) -> dict:
    return {"winner": evidence[0]["method"], "recommendation": {"evidence": list(evidence), "ships": ships}}


def test_the_winner_is_carried_where_it_scales() -> None:
    got = carry(zero(row("yarn:2", 1.0, 2), row("none", 0.0, 2)), 0.01)
    assert (got["carries"], got["carry_why"]) == ("yarn:2", "recommend's winner")
    assert got["reached"] is False  # 2 of 2: Wilson's lower bound 2 / (2 + 1.96^2) = 0.342 < 0.85


def test_none_crowned_for_want_of_evidence_carries_the_best_eligible_method_that_scales() -> None:
    """The order is recommend's; a scaled method out of the window's allowance is passed over (the control: it
    ranks above the one carried)."""
    got = carry(zero(row("none", 0.0, 25), row("linear:1.5", 1.0, 25, eligible=False, regression=0.89),
                     row("ntk:1.5", 1.0, 25, regression=0.004), row("yarn:1.5", 1.0, 25)), 0.01)
    assert got["winner"] == "none" and got["carries"] == "ntk:1.5"
    assert "scales nothing" in got["carry_why"]
    # 25 of 25: 25 / (25 + 1.96^2) = 0.8668 >= 0.85, and 0.4 % in the window is within 1 %
    assert got["reached"] is True and "0.867" in got["why"]


def test_with_no_eligible_method_that_scales_the_winner_stays_and_says_why() -> None:
    got = carry(zero(row("none", 0.0, 2), row("linear:1.5", 0.5, 2, eligible=False)), 0.01)
    assert got["carries"] == "none" and "no eligible method scales" in got["carry_why"]
    assert got["reached"] is False


def test_the_checkpoint_as_it_is_scales_only_where_it_ships_a_scaling() -> None:
    shipped = carry(zero(row("as-is", 1.0, 2), row("ntk:2", 1.0, 2), ships="yarn x4"), 0.01)
    assert shipped["carries"] == "as-is"
    plain = carry(zero(row("as-is", 1.0, 2), row("ntk:2", 1.0, 2)), 0.01)
    assert plain["carries"] == "ntk:2"


def test_a_method_a_gguf_cannot_hold_is_passed_over_for_a_gguf_only() -> None:
    """dynamic has no GGUF form (llama.cpp has no dynamic NTK), so patch could not write it into the GGUF; a folder
    holds it (the control)."""
    record = zero(row("none", 0.0, 2), row("dynamic:2", 1.0, 2), row("yarn:2", 0.5, 2))
    assert carry(record, 0.01, gguf=True)["carries"] == "yarn:2"
    assert carry(record, 0.01)["carries"] == "dynamic:2"
    won = carry(zero(row("dynamic:2", 1.0, 2), row("ntk:2", 0.5, 2)), 0.01, gguf=True)
    assert won["carries"] == "ntk:2" and "cannot be written into a GGUF" in won["carry_why"]


def test_for_a_gguf_the_methods_passed_over_are_those_patch_refuses_to_write() -> None:
    """The oracle is patch's own GGUF refusal, method by method: a scaled method is carried past ``none`` exactly
    where patch would write it into the GGUF."""
    from ropectl.errors import RopectlError
    from ropectl.patch.gguf import check_method_for_gguf
    from ropectl.rope.methods.registry import METHODS

    for name, method in METHODS.items():
        if method.unscaled or method.keeps_checkpoint:
            continue
        try:
            check_method_for_gguf(name)
            writable = True
        except RopectlError:
            writable = False
        got = carry(zero(row("none", 0.0, 2), row(f"{name}:2", 1.0, 2)), 0.01, gguf=True)["carries"]
        assert (got == f"{name}:2") is writable, name
