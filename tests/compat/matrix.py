"""Run the transformers compat tier outside pytest and print the matrix (the README's figures come from it).

    python tests/compat/matrix.py [--versions 4.43.4,5.23.0] [--keep DIR]

Cell legend: P = the version computes ropectl's RoPE; W = it differs (or fails) and patch warned naming
its range; U = it differs and patch did not warn; X = the reader module predicted something else;
R = ropectl refused the patch (with one error line); E(P) = an unpatched source the version cannot load.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
CACHE = Path(os.environ.get("ROPECTL_COMPAT_CACHE", Path.home() / ".cache" / "ropectl-compat"))


def versions() -> list[str]:
    return [v for v in (HERE / "versions.txt").read_text().split() if v[0].isdigit()]


def run_version(version: str, cases: dict[str, Any], work: Path) -> dict[str, Any] | None:
    from cases import LENGTHS

    python = CACHE / f"tf-{version}" / "bin" / "python"
    if not python.exists():
        return None
    jobs = work / f"jobs-{version}.json"
    jobs.write_text(json.dumps([{"folder": str(c.folder), "lengths": list(LENGTHS)}
                                for c in cases.values() if c.folder is not None]))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([str(python), str(HERE / "runner.py"), str(jobs)], capture_output=True, text=True,
                          env=env, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"runner failed in transformers {version}: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


def cell(version: str, case: Any, measured: dict[str, Any] | None) -> tuple[str, str]:
    """(code, why) for one (version, case)."""
    from test_transformers import mismatch

    from ropectl.readers.transformers import predict, reader_for

    if case.folder is None:
        return "R", case.refused or ""
    assert measured is not None
    reader = reader_for(version)
    reading = predict(reader, case.config, version)
    if reading.error and "error" not in measured:
        return "X", f"predicted '{reading.error}' but it loaded"
    if not reading.error:
        if "error" in measured:
            return "X", f"predicted a load but: {measured['error']}"
        why = mismatch(measured, dict(reading.ropes))
        if why:
            return "X", f"prediction wrong: {why}"
    wrong = measured.get("error") or mismatch(measured, case.expected)
    if case.name.endswith("unpatched"):
        return ("E" if "error" in measured else "P"), wrong or ""
    if not wrong:
        return "P", ""
    warned = any(reader.label in w for w in case.warnings)
    return ("W" if warned else "U"), wrong


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--versions", default=",".join(versions()))
    parser.add_argument("--keep", type=Path, default=None, help="folder for the patched checkpoints and results")
    args = parser.parse_args()
    from cases import build

    work = args.keep or Path(tempfile.mkdtemp(prefix="ropectl-compat-"))
    work.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    cases = {c.name: c for c in build(work / "ckpt")}
    print(f"patched {len(cases)} cases in {time.perf_counter() - start:.1f}s", file=sys.stderr)
    rows: dict[str, dict[str, tuple[str, str]]] = {name: {} for name in cases}
    for version in args.versions.split(","):
        t = time.perf_counter()
        measured = run_version(version, cases, work)
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
