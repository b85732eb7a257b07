"""What one eval-tasks trial of each task costs against one eval-ppl forward of the same length.

Each measurement is a real sweep on the embedded SmolLM2-135M GGUF and corpus (method ``none``, one trial or one
document, one length), timed from its first forward to its last through the progress callback, so the weight load
and prompt generation are left out. Every sweep runs ``--rounds`` times in turn with the others (best kept), so
spells of load from other jobs fall on all of them alike.

    .venv/bin/python bench/bench_tasks.py --length 4k --rounds 2 --json-out bench/results/tasks-4k.json
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

TASKS = ("niah_single_1", "niah_single_2", "niah_multikey_2", "niah_multivalue", "niah_multiquery", "vt", "cwe",
         "fwe", "passkey")


def timed(run: Any, spec: Any) -> float:
    """Seconds from the first forward's start to the last forward's end (the progress callback brackets them)."""
    marks: list[float] = []
    run(spec, progress=lambda p: marks.append(time.perf_counter()))
    return marks[-1] - marks[0]


def measure(length: int, dtype: str, rounds: int, tasks: tuple[str, ...]) -> dict[str, float]:
    from ropectl.eval.tasks.ppl import build_spec, run_eval
    from ropectl.eval.tasks.ruler.runner import run_tasks
    from ropectl.eval.tasks.ruler.spec import build_tasks_spec
    from ropectl.runtime.reuse import reusing

    best: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp, reusing():  # one load of the model for every sweep
        # untimed: the load, and the first forward's one-off kernel set-up, fall on no measurement
        run_eval(build_spec(methods=["none"], lengths=[length], docs=1, dtype=dtype, out=Path(tmp) / "warm-up"))
        for r in range(rounds):
            out = Path(tmp) / f"ppl-{r}"
            ppl = build_spec(methods=["none"], lengths=[length], docs=1, dtype=dtype, out=out)
            best["eval-ppl forward"] = min(best.get("eval-ppl forward", 1e9), timed(run_eval, ppl))
            for task in tasks:
                spec = build_tasks_spec(tasks=task, methods=["none"], lengths=[length], samples=1, dtype=dtype,
                                        out=Path(tmp) / f"{task}-{r}")
                best[task] = min(best.get(task, 1e9), timed(run_tasks, spec))
    return best


def main() -> None:
    from ropectl.runtime.lengths import parse_length

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", default="4k")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    length = parse_length(args.length)
    best = measure(length, args.dtype, args.rounds, tuple(args.tasks.split(",")))
    ppl = best["eval-ppl forward"]
    print(f"length {length}, dtype {args.dtype}, best of {args.rounds}; {platform.processor() or platform.machine()}")
    for name, seconds in best.items():
        print(f"{name:18s} {seconds:7.2f} s  {seconds / ppl:5.2f}x eval-ppl")
    if args.json_out:
        args.json_out.write_text(json.dumps({"length": length, "dtype": args.dtype, "rounds": args.rounds,
                                             "seconds": best}, indent=2) + "\n")


if __name__ == "__main__":
    main()
