"""Passkey accuracy heatmaps: depth (rows) x length (columns), one panel per method, trained context marked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ropectl.io.files import save_figure
from ropectl.runtime.lengths import length_label


def plot_passkey(table: list[Any], methods: list[str], lengths: list[int], depths: list[float],
                 trained: int | None, path: Path, title: str = "") -> Path:

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [m for m in methods if any(a.method == m for a in table)]
    width = max(3.2, 0.75 * len(lengths) + 1.6)
    fig, axes = plt.subplots(1, len(shown), figsize=(width * len(shown) + 1.2, 0.45 * len(depths) + 2.4), dpi=120,
                             squeeze=False, sharey=True)
    image = None
    for ax, method in zip(axes[0], shown, strict=True):
        image = _panel(ax, [a for a in table if a.method == method], lengths, depths, trained)
        ax.set_title(method, fontsize=10)
        ax.set_xlabel("length (tokens)")
    axes[0][0].set_ylabel("depth of the key (0 = start)")
    if image is not None:
        fig.colorbar(image, ax=axes[0].tolist(), fraction=0.03, pad=0.02, label="accuracy")
    fig.suptitle(f"passkey retrieval · {title}", fontsize=10)
    save_figure(fig, path, bbox_inches="tight")
    return path


def _panel(ax: Any, cells: list[Any], lengths: list[int], depths: list[float], trained: int | None) -> Any:
    import numpy as np

    grid = np.full((len(depths), len(lengths)), np.nan)
    for a in cells:
        grid[depths.index(a.depth), lengths.index(a.length)] = a.accuracy
    image = ax.imshow(grid, cmap="RdYlGn", vmin=0, vmax=1, aspect="auto", origin="upper")
    for (i, j), value in np.ndenumerate(grid):
        if not np.isnan(value):
            ax.text(j, i, f"{value:.0%}", ha="center", va="center", fontsize=8)
    ax.set_xticks(range(len(lengths)))
    ax.set_xticklabels([length_label(n) for n in lengths])
    ax.set_yticks(range(len(depths)))
    ax.set_yticklabels([f"{d:g}" for d in depths])
    if trained:
        inside = [j for j, n in enumerate(lengths) if n <= trained]
        edge = (max(inside) + 0.5) if inside else -0.5
        if edge < len(lengths) - 0.5:
            ax.axvline(edge, color="black", linestyle="--", linewidth=1.2)
            ax.text(edge, -0.6, f" trained {length_label(trained)}", fontsize=7, va="bottom", ha="left")
    return image
