"""Steps to recover: the tiny Llama trained at 128 (bench/tiny_model.py) extended x4 to 512 by `ropectl finetune`.

Runs, per seed: linear, ntk and yarn trained at 512 (`--full`), PoSE + yarn (128-token window, positions to 512),
and `none` fine-tuned at 128, the confound control (fine-tuning on plays lowers PPL at every length). Every run scores
the same 30 held-out documents (the acts of the 6 plays the tiny model never saw) at 128 and 512 every --eval-every
steps; step 0 is eval-ppl on the patched, untrained model. The training documents are the 32 plays of the tiny
model's pretraining. Writes OUT/recover.json, OUT/report.md and OUT/recover.png (docs/reference/finetune-benchmark.md
takes them).

    .venv/bin/python bench/bench_finetune_recover.py                  # make bench-finetune: 2 seeds, 200 steps
    .venv/bin/python bench/bench_finetune_recover.py --steps 40 --seeds 0 --methods yarn,linear   # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]

from finetune_recover_lib import curve, curve_against, read_log, zero_shot_rows  # noqa: E402
from recover_report import write_report  # noqa: E402
from tiny_model import machine, tiny_model  # noqa: E402

TRAINED, TARGET, FACTOR = 128, 512, 4
HELD_PREFIX = "0-heldout__"  # the held-out acts' document ids (named to --held-out), listed first in the folder
# name -> (method spec, target, mode flags); the method of the zero-shot (step 0) row is the spec itself.
RUNS: dict[str, tuple[str, int, list[str]]] = {
    "none@128": ("none", TRAINED, ["--full"]),
    "linear": (f"linear:{FACTOR}", TARGET, ["--full"]),
    "ntk": (f"ntk:{FACTOR}", TARGET, ["--full"]),
    "yarn": (f"yarn:{FACTOR}", TARGET, ["--full"]),
    "pose+yarn": (f"yarn:{FACTOR}", TARGET, ["--pose", "--window", str(TRAINED)]),
}


def prepare_data(model: Path, out: Path) -> tuple[Path, list[str]]:
    """A folder of the held-out acts and the tiny model's training plays; returns the acts' document ids."""
    from ropectl.runtime.corpus import embedded_source

    recipe = json.loads((model / "recipe.json").read_text())
    data = out / "data"
    if data.exists():
        shutil.rmtree(data)
    data.mkdir(parents=True)
    held = sorted(p.name for p in (model / "heldout").glob("*.txt"))
    for name in held:
        shutil.copyfile(model / "heldout" / name, data / f"{HELD_PREFIX}{name}")
    for name, text in embedded_source().texts():
        if name not in recipe["held_out"]:
            (data / f"train__{name.replace('/', '__')}.txt").write_text(text, encoding="utf-8")
    return data, [f"{HELD_PREFIX}{n}" for n in held]  # a local file's document id is its relative path


def finetune(name: str, seed: int, args: argparse.Namespace, model: Path, data: Path, held: list[str]) -> Path:
    spec, target, mode = RUNS[name]
    out = args.out / "runs" / f"{name}-s{seed}"
    argv = ["finetune", str(model), "-m", spec.split(":")[0], "-t", str(target), *mode, "--dataset", str(data),
            "--held-out", ",".join(held), "--eval-every", str(args.eval_every), "--steps", str(args.steps),
            "--seed", str(seed), "--lr", str(args.lr), "--warmup", str(args.warmup), "--batch-size",
            str(args.batch), "--grad-accum", "1", "--dtype", args.dtype, "-o", str(out), "--force",
            "--short-mix", "0", "--no-doc-mask"]  # as measured before these options (bench_finetune_mix.py measures them)
    cmd = [sys.executable, "-m", "ropectl", *argv]
    print(f"[{name} seed {seed}] ropectl {' '.join(argv[:3])} ... -o {out}", file=sys.stderr, flush=True)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": str(args.threads)}
    with open(args.out / "runs" / f"{name}-s{seed}.log", "w", encoding="utf-8") as log:
        subprocess.run(cmd, check=True, env=env, stdout=log, stderr=subprocess.STDOUT)
    check_held_out(out, held)
    return out


def check_held_out(out: Path, held: list[str]) -> None:
    """The output's record must name exactly the held-out acts (found wherever the record keeps `held_out`)."""
    found = None
    for path in sorted(out.rglob("*.json")):
        try:
            found = _find_key(json.loads(path.read_text(encoding="utf-8")), "held_out")
        except (OSError, ValueError):
            continue
        if found is not None:
            break
    if found is None or sorted(map(str, found)) != sorted(held):
        raise SystemExit(f"{out}: recorded held-out documents {found} are not the held-out acts")


def _find_key(obj: Any, key: str) -> Any:
    if isinstance(obj, dict):
        if isinstance(obj.get(key), list):
            return obj[key]
        for v in obj.values():
            if (hit := _find_key(v, key)) is not None:
                return hit
    return None


def zero_shot(args: argparse.Namespace, model: Path) -> dict[str, dict[str, Any]]:
    """Step 0 of every run: eval-ppl on the held-out acts with each method patched in, nothing trained."""
    from ropectl.eval.tasks.ppl.results import load_outputs

    out = args.out / "zero-shot"
    specs = sorted({RUNS[n][0] for n in args.methods})
    cmd = [sys.executable, "-m", "ropectl", "eval-ppl", str(model), *[a for s in specs for a in ("-m", s)],
           "--lengths", f"{TRAINED},{TARGET}", "--dataset", str(model / "heldout"), "--dtype", args.dtype,
           "-n", str(len(list((model / "heldout").glob("*.txt")))),
           "-o", str(out), "--force"]
    subprocess.run(cmd, check=True, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.DEVNULL)
    cells = load_outputs(out)["cells"]
    return {s: zero_shot_rows(cells, s, (TRAINED, TARGET)) for s in specs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "finetune-recover")
    parser.add_argument("--methods", default=",".join(RUNS), help=f"any of {', '.join(RUNS)}")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--eval-every", type=int, default=20)
    # The references' 2e-5 is for 7B models near the end of their schedule; this 2M model was pretrained at
    # 1e-3, and at 2e-5 it barely moves in 200 steps.
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--batch", type=int, default=4, help="sequences per step")
    parser.add_argument("--dtype", default="fp32")
    # Single-threaded runs side by side: on a shared 2-core machine two OpenMP threads per process spin-wait.
    parser.add_argument("--jobs", type=int, default=2, help="runs at once")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument("--docs-out", type=Path, default=None,
                        help="also copy the plot here (the tables go into docs/reference/finetune-benchmark.md by hand)")
    parser.add_argument("--report-only", action="store_true", help="rewrite the report from OUT/recover.json")
    parser.add_argument("--collect", action="store_true",
                        help="report what the runs under OUT/runs have logged so far (finished or still training)")
    args = parser.parse_args()
    if args.report_only:
        return report(json.loads((args.out / "recover.json").read_text(encoding="utf-8")), args.out, args.docs_out)
    if args.collect:
        return collect(args)
    args.methods = [m for m in args.methods.split(",") if m]
    seeds = [int(s) for s in args.seeds.split(",")]
    cpu0, wall0 = _children_cpu(), time.perf_counter()
    model = tiny_model()
    data, held = prepare_data(model, args.out)
    steps0 = zero_shot(args, model)
    runs: dict[str, dict[int, list[dict[str, Any]]]] = {}
    timing: dict[str, float] = {}

    def one(job: tuple[str, int]) -> None:
        name, seed = job
        t0 = time.perf_counter()
        log = read_log(finetune(name, seed, args, model, data, held) / "train_log.jsonl")
        timing[f"{name}-s{seed}"] = round(time.perf_counter() - t0, 1)
        zero = [] if any(r["step"] == 0 for r in log) else [steps0[RUNS[name][0]]]
        runs.setdefault(name, {})[seed] = zero + log

    (args.out / "runs").mkdir(parents=True, exist_ok=True)
    jobs = [(n, s) for n in args.methods for s in seeds]
    with ThreadPoolExecutor(args.jobs) as pool:  # runs are subprocesses: threads only wait for them
        list(pool.map(one, jobs))
    runs = {n: dict(sorted(runs[n].items())) for n in args.methods}
    result = {"machine": machine(), "model": str(model), "held_out": held, "args": {
        k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}, "runs": runs, "wall_s": timing,
        "total_wall_s": round(time.perf_counter() - wall0, 1), "total_cpu_s": round(_children_cpu() - cpu0, 1),
        "pretrain": json.loads((model / "pretrain.json").read_text())}
    (args.out / "recover.json").write_text(json.dumps(result), encoding="utf-8")
    report(result, args.out, args.docs_out)


def report(result: dict[str, Any], out: Path, docs_out: Path | None) -> None:
    """Curves from the logs (seed keys are strings once read back from recover.json), then the report and plot."""
    runs = {n: {int(s): rows for s, rows in by.items()} for n, by in result["runs"].items()}
    curves = {n: {s: curve(rows, TRAINED, RUNS[n][1] if n != "none@128" else TRAINED) for s, rows in by.items()}
              for n, by in runs.items()}
    control = runs.get("none@128", {})
    against = {n: {s: curve_against(rows, control[s], TRAINED, TARGET) for s, rows in by.items() if s in control}
               for n, by in runs.items() if n != "none@128"}
    write_report(result, curves, against, out, docs_out)


def collect(args: argparse.Namespace) -> None:
    """The report from the logs as they stand: a finished run's OUT/train_log.jsonl, else its run folder's."""
    runs: dict[str, dict[int, list[dict[str, Any]]]] = {}
    for name in args.methods.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            out = args.out / "runs" / f"{name}-s{seed}"
            log = next((p for p in (out / "train_log.jsonl", Path(f"{out}.run") / "train_log.jsonl") if p.is_file()), None)
            if log is not None:
                runs.setdefault(name, {})[seed] = read_log(log)
    model = tiny_model()
    result = {"machine": machine(), "model": str(model), "partial": True, "args": {
        k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}, "runs": runs,
        "wall_s": {}, "total_wall_s": 0.0, "total_cpu_s": 0.0, "pretrain": json.loads((model / "pretrain.json").read_text())}
    (args.out / "recover.json").write_text(json.dumps(result), encoding="utf-8")
    report(result, args.out, args.docs_out)


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


if __name__ == "__main__":
    main()
