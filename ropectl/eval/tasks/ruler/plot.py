"""Score against length, one panel per task (and the task average), one line per method with its 95 % band;
the trained context and the effective-length threshold marked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ropectl.io.files import save_figure
from ropectl.runtime.lengths import length_label


def plot_tasks(table: list[Any], methods: list[str], tasks: list[str], trained: int | None, threshold: float,
               path: Path, title: str = "") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(4, len(tasks))
    rows = -(-len(tasks) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols + 0.6, 2.8 * rows + 0.8), dpi=120, squeeze=False,
                             sharey=True)
    for ax, task in zip(axes.flat, tasks):
        for method in methods:
            cells = sorted((s for s in table if s.task == task and s.method == method), key=lambda s: s.length)
            if not cells:
                continue
            x = [s.length for s in cells]
            ax.plot(x, [s.mean for s in cells], marker="o", label=method)
            ax.fill_between(x, [s.lo for s in cells], [s.hi for s in cells], alpha=0.15)
        ax.set_xscale("log", base=2)
        lengths = sorted({s.length for s in table})
        ax.set_xticks(lengths, [length_label(n) for n in lengths])
        ax.axhline(threshold, color="grey", linestyle=":", linewidth=1)
        if trained:
            ax.axvline(trained, color="black", linestyle="--", linewidth=1)
        ax.set_title(task, fontsize=9)
        ax.set_ylim(-0.03, 1.03)
    for ax in list(axes.flat)[len(tasks):]:
        ax.set_visible(False)
    axes[0][0].set_ylabel("score")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"long-context tasks · {title} (dashed: trained context; dotted: threshold)", fontsize=9)
    save_figure(fig, path, bbox_inches="tight")
    return path
