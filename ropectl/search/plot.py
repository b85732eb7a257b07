"""The search's two figures: fitness over trials, and found factors per dimension pair against closed forms."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ropectl.errors import OutputError
from ropectl.io.files import save_figure


def best_so_far(trials: Sequence[Mapping[str, Any]]) -> list[float | None]:
    """The lowest complete fitness up to each trial (None before the first complete one)."""
    out: list[float | None] = []
    best = math.inf
    for t in trials:
        if t.get("state") == "complete" and t.get("fitness") is not None:
            best = min(best, float(t["fitness"]))
        out.append(None if math.isinf(best) else best)
    return out


def plot_trials(trials: Sequence[Mapping[str, Any]], path: Path, *, title: str = "search: fitness per trial",
                ylabel: str = "fitness (lower is better)") -> None:
    """Each complete trial's fitness, the best-so-far line, and pruned / infeasible trials marked along the bottom
    (they have no fitness to place)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.8), dpi=120)
    done = [(t["number"], float(t["fitness"])) for t in trials if t.get("state") == "complete"
            and t.get("fitness") is not None]
    if done:
        ax.plot(*zip(*done), "o", ms=4, color="#1f77b4", alpha=0.7, label=f"complete ({len(done)})")
    best = [(t["number"], b) for t, b in zip(trials, best_so_far(trials)) if b is not None]
    if best:
        ax.step(*zip(*best), where="post", color="#d62728", lw=1.6, label="best so far")
    for state, marker, color in (("pruned", "v", "#ff7f0e"), ("infeasible", "x", "#7f7f7f")):
        xs = [t["number"] for t in trials if t.get("state") == state]
        if xs:  # placed just under the axis: no fitness, but counted against the budget
            ax.plot(xs, [0.0] * len(xs), marker, ms=6, color=color, transform=ax.get_xaxis_transform(),
                    clip_on=False, label=f"{state} ({len(xs)})")
    ax.set_xlabel("trial")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.25)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper right", fontsize=9)
    _save(fig, path)


def plot_factors(found: Sequence[float], reference: Mapping[str, Sequence[float]], path: Path, *,
                 title: str = "LongRoPE factors per dimension pair") -> None:
    """The searched rescale factor per rotary pair (lambda_i = base / scaled inverse frequency) against the closed
    forms' (e.g. YaRN's and linear's at the same target)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.8), dpi=120)
    for name, values in reference.items():
        ax.plot(range(len(values)), list(values), "--", lw=1.2, label=name)
    ax.plot(range(len(found)), list(found), "o-", ms=4, lw=1.8, color="#d62728", label="searched")
    ax.set_xlabel("dimension pair (0 = fastest-turning, highest frequency)")
    ax.set_ylabel("rescale factor λ (1 = unchanged)")
    ax.set_title(title)
    ax.grid(True, alpha=0.25)
    ax.legend(loc="upper left", fontsize=9)
    _save(fig, path)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> None:
    fig.tight_layout()
    try:
        save_figure(fig, Path(path))
    except OSError as exc:
        raise OutputError(f"cannot write plot '{path}' ({exc.strerror})", "choose a writable output folder") from None
