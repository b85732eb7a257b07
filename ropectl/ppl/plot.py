"""PPL against evaluation length, one line per method, log y, trained context marked."""

from __future__ import annotations

from pathlib import Path

from ropectl.fsutil import atomic_write_bytes
from ropectl.ppl.results import Aggregate


def length_label(n: int) -> str:
    return f"{n // 1024}k" if n % 1024 == 0 else (f"{n / 1024:.1f}k" if n >= 1024 else str(n))


def plot_ppl(aggregates: list[Aggregate], methods: list[str], trained: int | None, path: Path,
             title: str = "") -> Path:
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    lengths = sorted({a.length for a in aggregates})
    for method in methods:
        rows = sorted((a for a in aggregates if a.method == method), key=lambda a: a.length)
        if not rows:
            continue
        xs, ys = [a.length for a in rows], [a.ppl for a in rows]
        err = [a.ppl_se or 0.0 for a in rows]
        line = ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=method, linewidth=1.8, markersize=4)
        ax.annotate(f"{ys[-1]:.3g}", (xs[-1], ys[-1]), textcoords="offset points", xytext=(6, 0),
                    fontsize=8, va="center", color=line[0].get_color())
    if trained:
        ax.axvline(trained, color="0.3", linestyle="--", linewidth=1)
        ax.text(trained, 0.98, f" trained context {length_label(trained)}", transform=ax.get_xaxis_transform(),
                va="top", ha="left", fontsize=8, color="0.3")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(lengths)
    ax.set_xticklabels([length_label(n) for n in lengths])
    ax.minorticks_off()
    ax.set_xlabel("evaluation length (tokens)")
    ax.set_ylabel("perplexity (log scale, lower is better)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(title="method", fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
    return path
