"""The card's two plots: the score ratio by length with its intervals and the 0.85 threshold; both models' PPL by
length with the trained context and, beside it, the PPL ratio with its 1 + max-regression limit."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


def _figure(ncols: int) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # constrained: the right panel's y label stays clear of the left panel
    return plt.subplots(1, ncols, figsize=(4.6 * ncols, 3.4), dpi=120, squeeze=False, constrained_layout=True)


def _bars(ax: Any, rows: list[Mapping[str, Any]], key: str = "ratio") -> None:
    xs = [r["length"] for r in rows]
    ys = [r[key] for r in rows]
    hi = [r["hi"] if r["hi"] is not None and r["hi"] != float("inf") else r[key] for r in rows]
    ax.errorbar(xs, ys, yerr=[[y - r["lo"] for y, r in zip(ys, rows)], [h - y for y, h in zip(ys, hi)]], fmt="o-",
                capsize=3)


def plot_scores(d: Mapping[str, Any], path: Path) -> Path | None:
    from ropectl.io.files import save_figure

    rows = d["effective_length"].get("by_length") or []
    if not rows:
        return None
    fig, axes = _figure(1)
    ax = axes[0][0]
    _bars(ax, rows)
    ax.axhline(d["effective_length"]["threshold"], ls=":", color="k")
    ax.axvline(d["trained_context"], ls="--", color="grey")
    ax.set(xlabel="length (tokens)", ylabel="score ratio (extended ÷ base at reference)",
           title=f"score ratio, 95 % intervals (dotted: {d['effective_length']['threshold']:.2f})")
    save_figure(fig, path, bbox_inches="tight")
    return path


def plot_ppl(d: Mapping[str, Any], path: Path) -> Path | None:
    from ropectl.io.files import save_figure

    r = d["retention"]
    rows = [*r["ppl"], *([d["ppl_at_target"]] if d.get("ppl_at_target") else [])]
    if not rows:
        return None
    fig, axes = _figure(2)
    left, right = axes[0]
    for who in ("base", "extended"):
        left.plot([x["length"] for x in rows], [x[f"{who}_ppl"] for x in rows], "o-", label=who)
    left.axvline(d["trained_context"], ls="--", color="grey")
    left.set(xlabel="length (tokens)", ylabel="PPL", title=f"PPL on {r['dataset']}")
    left.legend()
    _bars(right, r["ppl"] or rows)
    right.axhline(1 + r["max_regression"], ls=":", color="k")
    right.set(xlabel="length (tokens)", ylabel="PPL ratio (extended ÷ base)",
              title=f"in-window PPL ratio (dotted: 1 + {r['max_regression']:g})")
    save_figure(fig, path, bbox_inches="tight")
    return path
