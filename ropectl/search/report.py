"""The honest part: the found parameters against the best closed-form method, on held-out documents the search
never saw (and needle trials drawn with another seed), paired, with intervals; and what ships.

"Beats" means the paired 95 % interval of the log-PPL ratio (found / closed form) at the target lies below 0 on the
held-out documents (``ropectl.eval.stats.paired_log_ratio``), the in-window PPL stays within the search's limit,
and the needle accuracy at the target is no lower than the closed form's (the guard: PPL alone picks methods that
retrieve nothing). Otherwise the closed form ships, and the report says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ropectl.rope.methods import MethodSpec
from ropectl.search.fitness import Measured, measure


@dataclass(frozen=True)
class Comparison:
    length: int
    ratio: float  # PPL(found) / PPL(closed form), token-weighted
    lo: float
    hi: float
    docs: int

    def to_dict(self) -> dict[str, Any]:
        return {"length": self.length, "ppl_ratio": self.ratio, "lo": self.lo, "hi": self.hi, "docs": self.docs}


@dataclass(frozen=True)
class Report:
    found: MethodSpec | None  # the search's best spec (None: no feasible trial)
    closed: MethodSpec  # the best closed-form method of the grid
    ships: MethodSpec
    beats: bool
    why: str
    target: Comparison | None = None
    inside: Comparison | None = None
    found_held: Measured | None = None
    closed_held: Measured | None = None
    held_docs: tuple[str, ...] = ()

    def to_dict(self, trained: int, target: int) -> dict[str, Any]:
        def held(m: Measured | None) -> dict[str, Any] | None:
            if m is None:
                return None
            return {"spec": m.spec, "ppl_target": _ppl(m, target), "ppl_inside": _ppl(m, trained),
                    "niah_accuracy": m.accuracy}

        return {"found": self.found.label if self.found else None, "closed_form": self.closed.label,
                "ships": self.ships.label, "beats": self.beats,
                "why": self.why, "at_target": self.target.to_dict() if self.target else None,
                "in_window": self.inside.to_dict() if self.inside else None, "found_held_out": held(self.found_held),
                "closed_form_held_out": held(self.closed_held), "held_out_docs": list(self.held_docs)}


def _ppl(m: Measured, length: int) -> float | None:
    value = m.log_ppl(length)
    return math.exp(value) if value is not None else None


def compare(a: Measured, b: Measured, length: int) -> Comparison:
    from ropectl.eval.stats import paired_log_ratio

    r = paired_log_ratio(a.nll[length], b.nll[length], a.tokens[length])
    return Comparison(length, r.ratio, r.lo, r.hi, r.n)


def held_out_report(setup: Any, found: MethodSpec | None) -> Report:
    """Measure the found spec and the closed form on the held-out documents and decide what ships."""
    from dataclasses import replace

    plan = replace(setup.plan, lengths=(setup.plan.target,), limit=None)
    closed, docs = setup.best_closed, tuple(d.doc_id for d in setup.held)
    closed_m = measure(setup.ev, closed, setup.held, setup.held_needles, plan)
    if found is None:
        return Report(None, closed, closed, False, "no trial was feasible (in-window PPL within the limit): the closed "
                      "form ships", closed_held=closed_m, held_docs=docs)
    if found.label == closed.label:  # the same method as written, however it was reached
        return Report(found, closed, closed, False, "the search found the closed form itself", closed_held=closed_m,
                      held_docs=docs)
    found_m = measure(setup.ev, found, setup.held, setup.held_needles, plan)
    at, inside = compare(found_m, closed_m, plan.target), compare(found_m, closed_m, plan.trained)
    ships, beats, why = decide(at, found_m, closed_m, setup.plan)
    return Report(found, closed, found if ships else closed, beats, why, at, inside, found_m, closed_m, docs)


def decide(at: Comparison, found: Measured, closed: Measured, plan: Any) -> tuple[bool, bool, str]:
    """(ship the found spec, it beats the closed form, why)."""
    beats = at.hi < 1.0
    if not beats:
        return False, False, (f"on {at.docs} held-out documents the PPL ratio at the target is {at.ratio:.4f} "
                              f"[{at.lo:.4f}, {at.hi:.4f}]: not below 1, so the closed form ships")
    inside = found.log_ppl(plan.trained)
    if plan.limit is not None and inside is not None and inside > plan.limit:
        return False, True, "it beats the closed form at the target but regresses in-window on held-out text"
    if (found.accuracy or 0.0) < (closed.accuracy or 0.0):
        return False, True, (f"it beats the closed form on PPL but retrieves fewer needles ({found.accuracy:.0%} "
                             f"against {closed.accuracy:.0%}): the closed form ships")
    return True, True, (f"PPL ratio at the target {at.ratio:.4f} [{at.lo:.4f}, {at.hi:.4f}] on {at.docs} held-out "
                        "documents, needle accuracy no lower: the found parameters ship")


def report_lines(report: Report, trained: int, target: int) -> list[str]:
    found = report.found.label if report.found else "nothing feasible"
    lines = [f"found: {found}; best closed form: {report.closed.label}"]
    for name, m in (("found", report.found_held), ("closed form", report.closed_held)):
        if m is not None:
            acc = f", niah {m.accuracy:.0%}" if m.accuracy is not None else ""
            lines.append(f"  held-out {name} {m.spec}: PPL {_ppl(m, target):.3f} at {target}, {_ppl(m, trained):.3f} "
                         f"at {trained}{acc}")
    for c in (report.target, report.inside):
        if c is not None:
            lines.append(f"  PPL ratio found / closed form at {c.length}: {c.ratio:.4f} [{c.lo:.4f}, {c.hi:.4f}] "
                         f"({c.docs} documents, paired)")
    lines.append(f"ships: {report.ships.label} ({report.why})")
    return lines
