"""The evidence card: ``extension.json`` (stable keys, docs/reference/report.md), ``EXTENSION.md`` (the same, for
people) and the two plots, written whole or not at all (atomic files)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ropectl.report import analysis as an
from ropectl.report.decide import Verdict, verdict
from ropectl.report.inputs import Inputs
from ropectl.report.plan import Plan
from ropectl.report.spec import CONFIDENCE, KEEP, THRESHOLD, ReportSpec

SCHEMA = 1
JSON, MARKDOWN, SCORE_PLOT, PPL_PLOT = "extension.json", "EXTENSION.md", "score-ratio.png", "ppl.png"


@dataclass(frozen=True, kw_only=True)
class Card:
    data: dict[str, Any]  # extension.json
    verdict: Verdict
    out: Path | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**self.data, "out": str(self.out) if self.out else None}


def build_card(spec: ReportSpec, inputs: Inputs, plan: Plan, m: Any) -> Card:
    kept, left = an.kept_tasks(m.screen, inputs.candidates, inputs.reference)
    left.update({t: f"its prompt does not fit the reference length {inputs.reference}" for t in inputs.too_long})
    ref, rows = an.length_rows(m.base_rows, m.ext_rows, kept, inputs.reference, inputs.lengths) if kept else (None, [])
    eff = an.effective(rows) if kept else None
    in_window = [n for n in inputs.ppl_lengths if n <= inputs.trained]
    ppl = an.ppl_rows(m.base_ppl, m.ext_ppl, inputs.ppl_lengths)
    window = [r for r in ppl if r.length in in_window]
    kept_ok = an.retained(window, spec.max_regression)
    need = an.samples_to_decide_length(next(r for r in rows if r.length == eff.stopped_at), ref) \
        if eff is not None and ref is not None and not eff.determined else None
    docs = an.docs_to_decide(window, spec.max_regression) if kept_ok is None else None
    v = verdict(target=spec.target, effective=eff, rows=rows, ppl=window, retained=kept_ok,
                max_regression=spec.max_regression, samples_needed=need, docs_needed=docs)
    ruler = an.ruler_absolute(rows) if rows else None
    diff = an.reference_difference(m.base_rows, m.ext_rows, kept, inputs.reference) if kept else None
    data = {
        "schema": SCHEMA, "verdict": {"status": v.status, "line": v.line, "failed": list(v.failed),
                                      "samples_to_decide": v.samples_to_decide, "docs_to_decide": v.docs_to_decide},
        "models": {"base": _model(spec.base, inputs.base_label, inputs.trained),
                   "extended": _model(spec.extended, inputs.extended_label, spec.target)},
        "target": spec.target, "trained_context": inputs.trained, "reference_length": inputs.reference,
        "lengths": list(inputs.lengths), "confidence": CONFIDENCE,
        "samples": plan.samples, "reference_samples": plan.reference_samples, "seed": spec.seed,
        "tasks": {"candidates": [*inputs.candidates, *inputs.too_long], "kept": kept, "left_out": left,
                  "keep_rule": f"base's Wilson lower bound >= {KEEP} at the reference length"},
        "effective_length": _effective(eff, rows, ref, THRESHOLD),
        "ruler_absolute": _effective(ruler, rows, None, None) if ruler else None,
        "retention": {"dataset": spec.retention_dataset, "path": inputs.retention, "docs": plan.docs,
                      "max_regression": spec.max_regression, "retained": kept_ok,
                      "ppl": [_ppl_row(r) for r in window], "tasks_at_reference": _diff(diff)},
        "ppl_at_target": next((_ppl_row(r) for r in ppl if r.length == spec.target), None),
    }
    return Card(data=data, verdict=v)


def _model(path: str, label: str, seq_len: int) -> dict[str, Any]:
    """The model's RoPE as ``inspect`` reads it (the keys of inspect --json a reader of the card needs)."""
    from ropectl.inspection.report import InspectSpec, inspect_model

    r = inspect_model(InspectSpec(model=path, seq_len=seq_len)).to_dict()
    keys = ("rope_type", "rope_theta", "factor", "scaling", "original_max_position_embeddings",
            "max_position_embeddings", "trained_context", "effective_theta", "attention_factor", "finetune")
    return {"path": path, "label": label, **{k: r.get(k) for k in keys}}


def _interval(ci: Any) -> dict[str, Any] | None:
    return None if ci is None else {"mean": ci.mean, "lo": ci.lo, "hi": ci.hi, "n": ci.n}


def _effective(eff: Any, rows: list[Any], ref: Any, threshold: float | None) -> dict[str, Any]:
    from ropectl.eval.tasks.ruler.spec import RULER_THRESHOLD

    by_length = [{"length": r.length, "extended": _interval(r.extended), "base": _interval(r.base),
                  "ratio": r.ratio, "lo": r.lo, "hi": r.hi, "status": eff.status(r.length) if eff else None}
                 for r in rows]
    return {"length": eff.length if eff else None, "determined": bool(eff and eff.determined),
            "stopped_at": eff.stopped_at if eff else None,
            "threshold": threshold if threshold is not None else RULER_THRESHOLD,
            "rule": "score ratio to the base's reference score, lower bound" if threshold is not None else
                    "the extended model's own score, lower bound",
            "base_reference": _interval(ref), **({"by_length": by_length} if threshold is not None else {})}


def _ppl_row(r: Any) -> dict[str, Any]:
    return {"length": r.length, "docs": r.ratio.n, "base_ppl": r.base_ppl, "extended_ppl": r.extended_ppl,
            "ratio": r.ratio.ratio, "lo": r.ratio.lo, "hi": r.ratio.hi}


def _diff(d: Any) -> dict[str, Any] | None:
    return None if d is None else {"n": d.n, "extended": d.mean_a, "base": d.mean_b, "diff": d.diff, "lo": d.lo,
                                   "hi": d.hi, "p_value": d.p_value, "test": d.test}


def write_card(out: Path, card: Card) -> Card:
    from ropectl.io.files import atomic_write_text
    from ropectl.output import dumps
    from ropectl.report.markdown import markdown
    from ropectl.report.plot import plot_ppl, plot_scores

    out.mkdir(parents=True, exist_ok=True)
    plots = {"score_ratio": plot_scores(card.data, out / SCORE_PLOT), "ppl": plot_ppl(card.data, out / PPL_PLOT)}
    card.data["plots"] = {k: p.name if p else None for k, p in plots.items()}
    atomic_write_text(out / JSON, dumps(finite(card.data), indent=2) + "\n")
    atomic_write_text(out / MARKDOWN, markdown(card.data))
    object.__setattr__(card, "out", out)
    return card


def finite(obj: Any) -> Any:
    """``obj`` with every infinite bound as null: an interval with no upper end (one document, no spread) is
    unbounded, and strict JSON has no Infinity."""
    import math

    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj
