"""The verdict's three branches on hand-made evidence (pure)."""

from __future__ import annotations

from ropectl.eval.effective import Point, effective_length
from ropectl.eval.stats import MeanInterval, PairedRatio
from ropectl.report.analysis import LengthRow, PplRow
from ropectl.report.decide import NOT_DETERMINED, NOT_REACHED, REACHED, verdict

SCORE = MeanInterval(30, 1.0, 0.89, 1.0)


def rows(*bounds: tuple[float, float]) -> list[LengthRow]:
    return [LengthRow(length=(i + 2) * 1024, extended=SCORE, base=None, ratio=(lo + hi) / 2, lo=lo, hi=hi)
            for i, (lo, hi) in enumerate(bounds)]


def ppl(lo: float, hi: float) -> list[PplRow]:
    return [PplRow(length=512, base_ppl=10.0, extended_ppl=10.0, ratio=PairedRatio(8, (lo + hi) / 2, lo, hi, False, 1),
                   spread=0.01)]


def decide(length_rows: list[LengthRow], ppl_rows: list[PplRow], retained: bool | None):
    eff = effective_length([Point(length=r.length, lo=r.lo, hi=r.hi) for r in length_rows], 0.85)
    return verdict(target=length_rows[-1].length, effective=eff, rows=length_rows, ppl=ppl_rows, retained=retained,
                   max_regression=0.01, samples_needed=22, docs_needed=12)


def test_reached_needs_both_criteria_decided() -> None:
    v = decide(rows((0.9, 1.1), (0.88, 1.0)), ppl(0.99, 1.005), True)
    assert v.status == REACHED and "3k" in v.line


def test_not_reached_names_the_criterion_and_margin() -> None:
    v = decide(rows((0.9, 1.1), (0.2, 0.6)), ppl(0.99, 1.005), True)
    assert v.status == NOT_REACHED and v.failed == ("effective length",)
    assert "effective length < 3k (target 3k): at 3k the score ratio's upper bound 0.600 is 0.250 below 0.85" in v.line
    v = decide(rows((0.9, 1.1), (0.88, 1.0)), ppl(1.2, 1.3), False)
    assert v.failed == ("retention",) and "exceeds 1.0100 by 0.1900" in v.line


def test_not_determined_says_what_would_decide() -> None:
    v = decide(rows((0.9, 1.1), (0.5, 1.2)), ppl(0.99, 1.005), True)
    assert v.status == NOT_DETERMINED and "about 22 samples per length" in v.line
    v = decide(rows((0.9, 1.1), (0.88, 1.0)), ppl(0.95, 1.2), None)
    assert v.status == NOT_DETERMINED and "about 12 documents" in v.line


def test_a_failing_length_decides_not_reached_past_an_undecided_one() -> None:
    v = decide(rows((0.5, 1.2), (0.1, 0.4)), ppl(0.99, 1.005), True)
    assert v.status == NOT_REACHED and v.failed == ("effective length",)
