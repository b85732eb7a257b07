"""Start-up cost of the CLI as users pay it: whole `ropectl ...` processes, median of N runs.

Each run is a fresh process (interpreter, site-packages, the package's finder, typer and click, the command's
module when it is loaded), timed by wall clock and by the CPU time the child used (user + system, from
getrusage), so a loaded machine shows in the wall column while the CPU column stays comparable.

    .venv/bin/python bench/bench_startup.py                    # --help, inspect --help, --version; 9 runs each
    .venv/bin/python bench/bench_startup.py --runs 15 --args "patch --help"
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

DEFAULT = ("--help", "inspect --help", "--version")


def one(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, child CPU seconds) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--args", action="append", help="A command line after `ropectl` (repeatable).")
    ap.add_argument("--ropectl", default=str(Path(sys.executable).parent / "ropectl"),
                    help="The entry point to run [default: the one beside this interpreter].")
    a = ap.parse_args()
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, {a.runs} runs each (after one warm-up run)")
    print(f"{'command':<26} {'wall median':>12} {'wall min':>9} {'CPU median':>11}")
    for args in a.args or DEFAULT:
        cmd = [a.ropectl, *shlex.split(args)]
        one(cmd)  # warm the page cache: users run a command more than once
        runs = [one(cmd) for _ in range(a.runs)]
        walls, cpus = [r[0] for r in runs], [r[1] for r in runs]
        print(f"{'ropectl ' + args:<26} {statistics.median(walls) * 1e3:>10.0f}ms {min(walls) * 1e3:>7.0f}ms "
              f"{statistics.median(cpus) * 1e3:>9.0f}ms")
    print(f"load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
