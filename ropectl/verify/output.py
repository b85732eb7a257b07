"""What verify writes, only under --out: ``verify.json`` (``VerifyResult.to_dict``) and ``verify-dnll.png``, the
mean |ΔNLL| against transformers by position per engine (the longest length each engine scored). Both atomic; the
folder's manifest lists them (``io.ownership.claim``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ropectl.errors import OutputError
from ropectl.io.files import atomic_write_text, save_figure, why_not_writable
from ropectl.io.ownership import claim
from ropectl.output import dumps
from ropectl.verify.spec import VerifyResult

JSON, PLOT = "verify.json", "verify-dnll.png"


def write(result: VerifyResult, out: str) -> VerifyResult:
    folder = Path(out).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create --out '{folder}' ({why_not_writable(folder) or exc})",
                          "pass a writable folder") from None
    claim(folder, "verify", [JSON, PLOT])
    plotted = plot(result, folder / PLOT)
    result = replace(result, files=(str(folder / JSON), *([str(folder / PLOT)] if plotted else [])))
    atomic_write_text(folder / JSON, dumps(result.to_dict(), indent=1) + "\n")
    return result


def plot(result: VerifyResult, path: Path) -> bool:
    """One line per engine scored; a dotted level at each engine's tolerance. False where nothing was scored."""
    rows = [r for r in result.rows if r.deltas]
    if not rows:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.8), dpi=120)
    for i, row in enumerate(rows):
        ((length, curve),) = row.deltas.items()
        ax.plot(range(2, len(curve) + 2), [max(v, 1e-12) for v in curve], lw=1.2, color=f"C{i}",
                label=f"{row.engine}: {row.verdict} ({length} tokens)")
        if row.tolerance:
            ax.axhline(row.tolerance, ls=":", lw=1.0, color=f"C{i}")
    for length in result.lengths:
        ax.axvline(length, ls="--", lw=0.6, color="#888888")
    ax.set_yscale("log")
    ax.set_xlabel("position (token predicted)")
    ax.set_ylabel("mean |ΔNLL| against transformers (nats)")
    ax.set_title(f"verify: trained {result.trained}, target {result.target}, {result.documents} documents")
    ax.grid(True, alpha=0.25)
    ax.legend(loc="best", fontsize=9)
    save_figure(fig, path)
    return True
