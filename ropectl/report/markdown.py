"""EXTENSION.md: the card for people, written from extension.json's data (one source for both)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ropectl.runtime.lengths import length_label as label


def _pct(ci: Mapping[str, Any] | None) -> str:
    return "-" if not ci else f"{ci['mean']:.0%} [{ci['lo']:.0%}, {ci['hi']:.0%}] (n={ci['n']})"


def _num(x: float | None, digits: int = 3) -> str:
    return "∞" if x is None or x == float("inf") else f"{x:.{digits}f}"


def markdown(d: Mapping[str, Any]) -> str:
    lines = [f"# Extension evidence: {label(d['trained_context'])} → {label(d['target'])}", "",
             f"**Verdict: {d['verdict']['line']}**", "", "## What was compared", "",
             "| | path | RoPE | θ | factor | max positions | trained context |", "|---|---|---|---|---|---|---|"]
    for who, m in d["models"].items():
        lines.append(f"| {who} | `{m['path']}` | {m['rope_type']} | {m['rope_theta']:g} | {m['factor'] or 1:g} | "
                     f"{m['max_position_embeddings']} | {m['trained_context']} |")
    lines += ["", *_tasks(d), *_effective(d), *_retention(d), *_plots(d)]
    return "\n".join(lines) + "\n"


def _tasks(d: Mapping[str, Any]) -> list[str]:
    t = d["tasks"]
    out = ["## Tasks", "", f"Reference length {label(d['reference_length'])} (a quarter of the trained context), "
           f"{d['reference_samples']} samples; kept where the {t['keep_rule']}: **{', '.join(t['kept']) or 'no task'}**.",
           ""]
    out += [f"- left out `{name}`: {why}" for name, why in t["left_out"].items()]
    return [*out, ""]


def _effective(d: Mapping[str, Any]) -> list[str]:
    e, r = d["effective_length"], d["ruler_absolute"]
    got = label(e["length"]) if e["length"] else "no length"
    state = "determined" if e["determined"] else "not determined (at least " + got + ")"
    out = ["## Effective length (NoLiMa's relative rule)", "",
           f"A length counts when the {CONFIDENCE_TEXT} lower bound of the score ratio (extended at the length ÷ base "
           f"at the reference, MOVER-R interval) is ≥ {e['threshold']:.2f} there and at every shorter length. "
           f"Effective length: **{got}**, {state}. Base at the reference: {_pct(e['base_reference'])}.", "",
           "| length | extended | base | ratio [95 %] | status |", "|---|---|---|---|---|"]
    for row in e.get("by_length", []):
        out.append(f"| {label(row['length'])} | {_pct(row['extended'])} | {_pct(row['base'])} | "
                   f"{_num(row['ratio'])} [{_num(row['lo'])}, {_num(row['hi'])}] | {row['status']} |")
    if r:
        abs_len = label(r["length"]) if r["length"] else "no length"
        out += ["", f"RULER's absolute rule (the extended model's own lower bound ≥ {r['threshold']:.1%}): "
                f"{abs_len}{'' if r['determined'] else ', not determined'}."]
    return [*out, ""]


def _retention(d: Mapping[str, Any]) -> list[str]:
    r = d["retention"]
    verdict = {True: "retained", False: "not retained", None: "not determined"}[r["retained"]]
    out = ["## Short-context retention", "",
           f"Paired PPL ratio extended ÷ base on `{r['dataset']}` ({r['docs']} documents, not the fine-tune data), "
           f"retained when the upper bound is ≤ 1 + {r['max_regression']:g}: **{verdict}**.", "",
           "| length | docs | PPL base | PPL extended | ratio [95 %] |", "|---|---|---|---|---|"]
    rows = [*r["ppl"], *([d["ppl_at_target"]] if d.get("ppl_at_target") else [])]
    for row in rows:
        out.append(f"| {label(row['length'])} | {row['docs']} | {row['base_ppl']:.3f} | {row['extended_ppl']:.3f} | "
                   f"{_num(row['ratio'], 4)} [{_num(row['lo'], 4)}, {_num(row['hi'], 4)}] |")
    t = r["tasks_at_reference"]
    if t:
        out += ["", f"Task score at the reference length: extended {t['extended']:.0%}, base {t['base']:.0%}, "
                f"paired difference {t['diff']:+.0%} [{t['lo']:+.0%}, {t['hi']:+.0%}], p = {t['p_value']:.2g} "
                f"({t['test']}, n={t['n']})."]
    return [*out, ""]


def _plots(d: Mapping[str, Any]) -> list[str]:
    plots = [p for p in (d.get("plots") or {}).values() if p]
    return ["## Plots", "", *[f"![{p}]({p})" for p in plots], ""] if plots else []


CONFIDENCE_TEXT = "95 %"
