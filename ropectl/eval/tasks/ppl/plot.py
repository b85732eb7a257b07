"""PPL against evaluation length, one line per method, log y, trained context marked.

A second panel shows each method's PPL divided by the unscaled model's at the same length (same
documents), where the methods' differences are visible even when one method is far off.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ropectl.eval.tasks.ppl.results import Aggregate
from ropectl.io.files import save_figure
from ropectl.runtime.lengths import length_label
from ropectl.runtime.model import REFERENCE

RATIO_CAP = 1.6  # ratios above this are drawn at the panel's edge and named there


def plot_ppl(aggregates: list[Aggregate], methods: list[str], trained: int | None, path: Path,
             title: str = "") -> Path:

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    reference = next((m for m in REFERENCE if m in methods and len(methods) > 1), None)
    rows = 2 if reference else 1
    fig, axes = plt.subplots(rows, 1, figsize=(8, 6.5 if rows == 2 else 4.8), dpi=120, sharex=True, squeeze=False,
                             gridspec_kw={"height_ratios": [3, 2][:rows]})
    lengths = sorted({a.length for a in aggregates})
    series = {m: sorted((a for a in aggregates if a.method == m), key=lambda a: a.length) for m in methods}
    colors = {m: f"C{i}" for i, m in enumerate(methods)}
    _ppl_panel(axes[0][0], series, colors, trained)
    if reference:
        _ratio_panel(axes[1][0], series, colors, reference, trained)
    ax = axes[-1][0]
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths)
    ax.set_xticklabels([length_label(n) for n in lengths])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xlabel("evaluation length (tokens)")
    axes[0][0].set_title(title, fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)
    return path


def plot_positions(found: list[Any], methods: list[str], trained: int | None, path: Path, mode: str,
                   title: str = "") -> Path:
    """Mean NLL per position bucket, one line per method (its longest length), trained context marked."""

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ropectl.eval.tasks.ppl.positions import longest_per_method

    fig, ax = plt.subplots(figsize=(8, 4.8), dpi=120)
    for curve in longest_per_method(found, methods):
        xs = [(k + 0.5) * curve.bucket for k, n in enumerate(curve.tokens) if n]
        ys = [v for v, n in zip(curve.nll, curve.tokens, strict=True) if n]
        ax.plot(xs, ys, color=f"C{methods.index(curve.method)}", marker="o", markersize=2.5, linewidth=1.5,
                label=f"{curve.method} (L={length_label(curve.length)}, {curve.docs} doc{'s' * (curve.docs != 1)})")
    _mark_trained(ax, trained, label=True)
    where = "position in the document" if mode == "truncate" else "position inside the window (context length)"
    ax.set_xlabel(f"{where}, tokens ({found[0].bucket}-token buckets)")
    ax.set_ylabel("mean NLL per token (nats)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    ax.set_title(f"loss by position · {title}" if title else "loss by position", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)
    return path


def _ppl_panel(ax: Any, series: dict[str, list[Aggregate]], colors: dict[str, str], trained: int | None) -> None:
    import matplotlib.ticker as ticker

    for i, (method, rows) in enumerate(series.items()):
        if not rows:
            continue
        dodge = 1 + 0.012 * (i - (len(series) - 1) / 2)  # keep error bars of equal lengths apart
        xs = [a.length * dodge for a in rows]
        ax.errorbar(xs, [a.ppl for a in rows], yerr=[a.ppl_se or 0.0 for a in rows], color=colors[method],
                    marker="o", markersize=4, linewidth=1.8, capsize=2, elinewidth=0.8, label=method)
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8)))
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_locator(ticker.NullLocator())
    ax.set_ylabel("perplexity (log scale)")
    ax.grid(True, alpha=0.3)
    _mark_trained(ax, trained, label=True)
    has_se = any(a.ppl_se for rows in series.values() for a in rows)
    ax.legend(title="method (± s.e. across documents)" if has_se else "method", fontsize=8, title_fontsize=8,
              loc="best")


def _ratio_panel(ax: Any, series: dict[str, list[Aggregate]], colors: dict[str, str], reference: str,
                 trained: int | None) -> None:
    base = {a.length: a.ppl for a in series[reference]}
    ratios = {m: [(a.length, a.ppl / base[a.length]) for a in rows if a.length in base] for m, rows in series.items()}
    shown = [r for pts in ratios.values() for _, r in pts if r <= RATIO_CAP]
    low, high = min(shown + [1.0]), max(shown + [1.0])
    pad = max(0.01, (high - low) * 0.12)
    top = high + pad
    for method, pts in ratios.items():
        if not pts:
            continue
        ys = [min(r, top) for _, r in pts]
        ax.plot([x for x, _ in pts], ys, color=colors[method], marker="o", markersize=4, linewidth=1.8,
                linestyle=":" if max(r for _, r in pts) > top else "-")
        if max(r for _, r in pts) > top:
            ax.annotate(f"{method}: {min(r for _, r in pts):.2g}–{max(r for _, r in pts):.2g}× (off scale)",
                        (pts[0][0], top), textcoords="offset points", xytext=(2, -10), fontsize=7,
                        color=colors[method])
    ax.axhline(1.0, color="0.5", linewidth=0.8)
    ax.set_ylim(low - pad, top)
    ax.set_ylabel(f"PPL ÷ PPL({reference})")
    ax.grid(True, alpha=0.3)
    _mark_trained(ax, trained, label=False)


def _mark_trained(ax: Any, trained: int | None, label: bool) -> None:
    if not trained:
        return
    ax.axvline(trained, color="0.3", linestyle="--", linewidth=1)
    if label:
        ax.text(trained, 0.02, f" trained context {length_label(trained)}", transform=ax.get_xaxis_transform(),
                va="bottom", ha="left", fontsize=8, color="0.3")
