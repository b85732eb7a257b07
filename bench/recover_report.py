"""The steps-to-recover report: a markdown table per method and step, a summary, and the plot."""

from __future__ import annotations

import shutil
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from finetune_recover_lib import WITHIN, Point, steps_to_recover

CONTROL = "none@128"


Curves = Mapping[str, Mapping[int, Sequence[Point]]]


def summary_rows(curves: Curves, against: Curves, tokens_per_step: Mapping[str, int]) -> list[str]:
    out = ["| method | tokens / step | PPL@512 ÷ PPL@128 at step 0 | last step: ratio [95 % CI] | steps (tokens) to "
           f"within {WITHIN - 1:.0%}, per seed | same, CI upper end within | last step: PPL@512 ÷ control's PPL@128 "
           f"[95 % CI] | steps (tokens) to within {WITHIN - 1:.0%} of the control |", "|---|---:|---|---|---|---|---|---|"]
    for name, by_seed in curves.items():
        if name == CONTROL:
            continue
        first = [pts[0] for pts in by_seed.values() if pts]
        last = [pts[-1] for pts in by_seed.values() if pts]
        rec = [_when(steps_to_recover(pts)) for pts in by_seed.values()]
        strict = [_when(steps_to_recover(pts, strict=True)) for pts in by_seed.values()]
        zero = " / ".join(f"{p.ratio:.2f}" for p in first)
        end = " / ".join(f"{p.step}: {p.ratio:.3f} [{p.lo:.3f}, {p.hi:.3f}]" for p in last)
        vs = against.get(name, {})
        vs_end = " / ".join(f"{pts[-1].ratio:.3f} [{pts[-1].lo:.3f}, {pts[-1].hi:.3f}]" for pts in vs.values() if pts)
        vs_rec = "; ".join(_when(steps_to_recover(pts)) for pts in vs.values())
        out.append(f"| {name} | {tokens_per_step.get(name, 0):,} | {zero} | {end} | {'; '.join(rec)} | "
                   f"{'; '.join(strict)} | {vs_end or '–'} | {vs_rec or '–'} |")
    return out


def _when(p: Point | None) -> str:
    return "not within" if p is None else f"{p.step} ({p.tokens:,})"


def step_rows(curves: Curves) -> list[str]:
    out = ["| method | step | tokens | PPL@128 | PPL@512 | ratio [95 % CI] per seed |", "|---|---:|---:|---|---|---|"]
    for name, by_seed in curves.items():
        steps = sorted({p.step for pts in by_seed.values() for p in pts})
        for step in steps:
            pts = [p for s in sorted(by_seed) for p in by_seed[s] if p.step == step]
            ppl128 = " / ".join(f"{p.ppl_trained:.2f}" for p in pts)
            if name == CONTROL:
                out.append(f"| {name} | {step} | {pts[0].tokens:,} | {ppl128} | – | – |")
                continue
            ppl512 = " / ".join(f"{p.ppl_target:.2f}" for p in pts)
            ratio = " / ".join(f"{p.ratio:.3f} [{p.lo:.3f}, {p.hi:.3f}]" for p in pts)
            out.append(f"| {name} | {step} | {pts[0].tokens:,} | {ppl128} | {ppl512} | {ratio} |")
    return out


def plot(curves: Curves, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ropectl.io.files import save_figure

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, (name, by_seed) in enumerate(curves.items()):
        color = f"C{i}"
        for seed, pts in sorted(by_seed.items()):
            label = name if seed == min(by_seed) else None
            if name != CONTROL:
                left.plot([p.step for p in pts], [p.ratio for p in pts], color=color, marker="o", ms=3, label=label)
                left.fill_between([p.step for p in pts], [p.lo for p in pts], [p.hi for p in pts], color=color, alpha=0.05)
            right.plot([p.step for p in pts], [p.ppl_trained for p in pts], color=color, ls=":", label=None)
            if name != CONTROL:
                right.plot([p.step for p in pts], [p.ppl_target for p in pts], color=color, marker="o", ms=3,
                           label=label)
            elif seed == min(by_seed):
                right.plot([], [], color=color, ls=":", label=f"{name} (PPL@128)")
    left.axhline(WITHIN, color="grey", ls="--", lw=1, label=f"within {WITHIN - 1:.0%}")
    left.set(yscale="log", xlabel="fine-tune step", ylabel="PPL@512 ÷ PPL@128 (same model)",
             title="Recovery at 4x (held-out acts, 95 % CI)")
    right.set(yscale="log", xlabel="fine-tune step", ylabel="held-out PPL",
              title="PPL@512 (solid), PPL@128 (dotted)")
    from matplotlib.ticker import FormatStrFormatter

    for ax in (left, right):  # plain numbers on the log axes, not powers of ten
        ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(FormatStrFormatter("%g"))
    left.legend(fontsize=8)
    right.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def write_report(result: Mapping[str, Any], curves: Curves, against: Curves, out: Path, docs_out: Path | None) -> None:
    args = result["args"]
    tps = {n: args["batch"] * (128 if n in (CONTROL, "pose+yarn") else 512) for n in curves}
    m = result["machine"]
    flags = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in m["flags"].items())
    walls = result["wall_s"]
    per = {n: statistics.mean(v) for n in curves if (v := [w for k, w in walls.items() if k.startswith(n + "-s")])}
    lines = [f"Machine: {m['cpu']}, {m['cores']} cores ({flags}); dtype {args['dtype']}; LR {args['lr']}, warm-up "
             f"{args['warmup']}, {args['batch']} sequences per step, seeds {args['seeds']}; " + (
                 "PARTIAL: the logs as they stood, some runs still training." if result.get("partial") else
                 f"total {result['total_wall_s'] / 60:.1f} min wall, {result['total_cpu_s'] / 60:.1f} CPU-min."), "",
             "Mean wall seconds per run: " + ", ".join(f"{n} {s:.0f}" for n, s in per.items()) + ".", "",
             *summary_rows(curves, against, tps), "", *step_rows(curves)]
    (out / "report.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    plot(curves, out / "recover.png")
    if docs_out:
        docs_out.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out / "recover.png", docs_out / "finetune-recover.png")
