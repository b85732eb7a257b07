"""Wavelength plot for ``inspect``: which dimension pairs ever complete a turn in the trained context."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ropectl.errors import OutputError
from ropectl.io.files import save_figure


def plot_wavelengths(report: Any, path: Path) -> None:
    """``report`` is inspection's InspectReport (its pairs, base_theta and model), taken by shape so that this
    module does not import inspection, which imports it."""

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs = report.pairs
    xs = [p.index for p in pairs]
    fig, ax = plt.subplots(figsize=(9, 5.2), dpi=120)
    ax.plot(xs, [p.base_wavelength for p in pairs], "o-", ms=3, color="#1f77b4", label=f"base RoPE (θ={report.base_theta:g})")
    scaled = [p.wavelength for p in pairs]
    if any(abs(a - p.base_wavelength) > 1e-9 * p.base_wavelength for a, p in zip(scaled, pairs)):
        rope = report.model.rope
        kind = rope.rope_type + (f" ×{rope.factor:g}" if rope.factor else "")
        if rope.rope_type == "default":
            kind = f"θ={rope.rope_theta:g}"
        label = f"{kind} (as the model will run" + (f" at {report.seq_len} tokens)" if report.seq_len else ")")
        ax.plot(xs, scaled, "s-", ms=3, color="#d62728", label=label)
    ax.set_yscale("log")
    _mark_contexts(ax, report, len(pairs))
    ax.set_xlabel("dimension pair (0 = fastest-turning, highest frequency)")
    ax.set_ylabel("wavelength 2π / inv_freq  (tokens, log scale)")
    name = Path(report.source).name or report.source
    ax.set_title(f"{name}: RoPE wavelength per dimension pair\n"
                 "pairs above the trained-context line never made a full turn in training")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(loc="lower right", fontsize=9)
    fig.tight_layout()
    try:
        save_figure(fig, path)
    except OSError as exc:
        raise OutputError(f"cannot write plot '{path}' ({exc.strerror})", "choose a writable path for --plot") from None


def _mark_contexts(ax: object, report: Any, n: int) -> None:
    trained, target = report.trained_context, report.target_context
    if trained:
        ax.axhline(trained, color="black", ls="--", lw=1.2)
        ax.text(n - 1, trained, f"trained context {trained:,}", ha="right", va="bottom", fontsize=9)
        top = max(max(p.wavelength for p in report.pairs), max(p.base_wavelength for p in report.pairs), trained) * 2
        ax.axhspan(trained, top, color="orange", alpha=0.08)
        ax.text(0, top / 1.3, "never completes a turn within the trained context:\n"
                "positions beyond it look new here, so these pairs must be interpolated",
                fontsize=8, va="top", color="#8a5a00")
        ax.set_ylim(top=top)
    if target:
        ax.axhline(target, color="#2ca02c", ls=":", lw=1.2)
        ax.text(n - 1, target, f"target context {target:,}", ha="right", va="bottom", fontsize=9, color="#2ca02c")
