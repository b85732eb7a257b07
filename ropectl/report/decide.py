"""The one verdict line: reached, not reached (which criterion, by how much), or not determined (what would decide).

Reached needs both criteria decided in its favour: the effective length reaches the target, and the in-window PPL
ratio's upper bound is within 1 + max_regression. One criterion decided against is enough for "not reached". Anything
else is "not determined": never "reached" from intervals that cannot tell.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ropectl.eval.effective import FAILS, Effective
from ropectl.report.analysis import LengthRow, PplRow
from ropectl.report.spec import THRESHOLD
from ropectl.runtime.lengths import length_label as label

REACHED, NOT_REACHED, NOT_DETERMINED = "reached", "not reached", "not determined"


@dataclass(frozen=True, kw_only=True)
class Verdict:
    status: str
    line: str
    failed: tuple[str, ...] = ()  # the criteria decided against: "effective length", "retention"
    samples_to_decide: int | None = None  # per length, where the effective length is undecided
    docs_to_decide: int | None = None  # where retention is undecided


def verdict(*, target: int, effective: Effective | None, rows: Sequence[LengthRow], ppl: Sequence[PplRow],
            retained: bool | None, max_regression: float, samples_needed: int | None, docs_needed: int | None,
            ) -> Verdict:
    limit = 1.0 + max_regression
    fails, failed = [], []
    failing = next((n for n, state in effective.statuses if state == FAILS), None) if effective else None
    if failing is not None:  # one length decided below the threshold: the target is not reached, whatever before it
        row = next(r for r in rows if r.length == failing)
        fails.append(f"effective length < {label(failing)} (target {label(target)}): at {label(failing)} the score "
                     f"ratio's upper bound {row.hi:.3f} is {THRESHOLD - row.hi:.3f} below {THRESHOLD:.2f}")
        failed.append("effective length")
    if retained is False:
        worst = max(ppl, key=lambda r: r.ratio.lo)
        fails.append(f"retention: at {label(worst.length)} the PPL ratio's lower bound {worst.ratio.lo:.4f} exceeds "
                     f"{limit:.4f} by {worst.ratio.lo - limit:.4f}")
        failed.append("retention")
    if fails:
        return Verdict(status=NOT_REACHED, line=f"{NOT_REACHED}: " + "; ".join(fails), failed=tuple(failed))
    if effective is not None and effective.determined and retained:
        at = next(r for r in rows if r.length == target)
        worst = max(ppl, key=lambda r: r.ratio.hi)
        return Verdict(status=REACHED, line=(
            f"{REACHED}: effective length {label(target)} (score ratio's lower bound {at.lo:.3f} >= {THRESHOLD:.2f} "
            f"at every length up to it) and retained (PPL ratio's upper bound {worst.ratio.hi:.4f} <= {limit:.4f})"))
    return Verdict(status=NOT_DETERMINED, line=f"{NOT_DETERMINED}: " + "; ".join(
        _open(effective, samples_needed, retained, docs_needed)), samples_to_decide=samples_needed,
        docs_to_decide=docs_needed)


def _open(effective: Effective | None, samples: int | None, retained: bool | None, docs: int | None) -> list[str]:
    parts = []
    if effective is None:
        parts.append("no task is done by the base at the reference length, so the relative rule has nothing to keep")
    elif not effective.determined:
        at = effective.stopped_at
        need = f"about {samples} samples per length would decide it" if samples else \
            "the score there sits at the threshold: no sample size decides it"
        parts.append(f"effective length (n too small: at {label(at or 0)} the score ratio's interval holds "
                     f"{THRESHOLD:.2f}; {need})")
    if retained is None:
        need = f"about {docs} documents would decide it" if docs else "more documents would decide it"
        parts.append(f"retention (the PPL ratio's interval holds the limit; {need})")
    return parts

