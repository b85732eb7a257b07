"""Run the transformers compat tier outside pytest and print the matrix (docs/reference/compatibility.md's figures come from it).

    python tests/compat/matrix.py [--versions 4.43.4,5.23.0] [--keep DIR]

Cell legend: P = the version computes ropectl's RoPE; W = it differs (or fails) and patch warned naming
its range; U = it differs and patch did not warn; X = the reader module predicted something else;
R = ropectl refused the patch (with one error line); E(P) = an unpatched source the version cannot load.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from tier import cell, run_version, versions  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--versions", default=",".join(versions()))
    parser.add_argument("--keep", type=Path, default=None, help="folder for the patched checkpoints and results")
    parser.add_argument("--reuse", action="store_true",
                        help="judge the cells again from the results saved in --keep (after a reader-entry change)")
    args = parser.parse_args()
    from cases import build

    work = args.keep or Path(tempfile.mkdtemp(prefix="ropectl-compat-"))
    work.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(work / "ckpt", ignore_errors=True)
    start = time.perf_counter()
    cases = {c.name: c for c in build(work / "ckpt")}
    print(f"patched {len(cases)} cases in {time.perf_counter() - start:.1f}s", file=sys.stderr)
    rows: dict[str, dict[str, tuple[str, str]]] = {name: {} for name in cases}
    for version in args.versions.split(","):
        t = time.perf_counter()
        saved = work / f"results-{version}.json"
        measured = json.loads(saved.read_text()) if args.reuse and saved.exists() else run_version(version, cases, work)
        print(f"transformers {version}: {time.perf_counter() - t:.1f}s", file=sys.stderr)
        if measured is None:
            print(f"  no venv for {version}", file=sys.stderr)
            continue
        (work / f"results-{version}.json").write_text(json.dumps(measured))
        for name, case in cases.items():
            rows[name][version] = cell(version, case, measured.get(str(case.folder)))
    vs = [v for v in args.versions.split(",") if any(v in r for r in rows.values())]
    print("| case | " + " | ".join(vs) + " |\n|---|" + "---|" * len(vs))
    for name, row in rows.items():
        print(f"| {name} | " + " | ".join(row.get(v, ("-", ""))[0] for v in vs) + " |")
    bad = [(n, v, why) for n, row in rows.items() for v, (code, why) in row.items() if code in "UX"]
    for n, v, why in bad:
        print(f"{v} {n}: {rows[n][v][0]} {why}", file=sys.stderr)
    counts: dict[str, int] = {}
    for row in rows.values():
        for code, _ in row.values():
            counts[code] = counts.get(code, 0) + 1
    print(f"cells: {counts}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
