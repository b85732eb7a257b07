"""Short documents and document masking (ProLong) against retention: the tiny Llama (bench/tiny_model.py) extended x4
by `ropectl finetune` PoSE + YaRN, with and without `--short-mix 0.4` and `--doc-mask`.

Four runs per seed, identical but for the two options (same data, steps, LR, seed): `--short-mix 0 --no-doc-mask`
(what finetune did before the options), `--short-mix 0.4`, `--doc-mask`, both. After training, every run's model and
the untrained tiny model score:
- retention: the first 128 tokens (the trained window) of each Python documentation topic long enough
  (pydoc_data, `ropectl report`'s default retention text: not the plays trained on), per-topic NLL;
- in-window on the plays: the first 128 tokens of the 30 held-out acts (never trained on, but the training's domain:
  the tiny model's BPE was trained on the plays, so the pydoc topics are far outside what it models, PPL ~770);
- extension: the first 512 tokens (the target) of the 30 held-out acts.
Figures: retention = PPL@128 of the run ÷ PPL@128 of the untrained model, and each option against the run without
it (same seed), both paired over the same documents (ropectl/eval/stats.py paired_log_ratio, 95 % Student t over
documents: the interval does not hold the seed's variance; the seeds are shown side by side for that). Writes
OUT/mix.json and OUT/report.md.

    .venv/bin/python bench/bench_finetune_mix.py                     # 2 seeds, 200 steps (docs/reference/finetune-benchmark.md)
    .venv/bin/python bench/bench_finetune_mix.py --steps 20 --seeds 0 # a quick look
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]

from bench_finetune_recover import check_held_out, prepare_data  # noqa: E402
from tiny_model import machine, tiny_model  # noqa: E402

TRAINED, TARGET = 128, 512
# name -> (--short-mix, --doc-mask); "plain" is finetune before the options
RUNS: dict[str, tuple[float, bool]] = {"plain": (0.0, False), "short": (0.4, False), "mask": (0.0, True),
                                       "short+mask": (0.4, True)}
# each option against the run that lacks only it
CONTRASTS = (("short", "plain"), ("short+mask", "mask"), ("mask", "plain"), ("short+mask", "short"))


def finetune(name: str, seed: int, args: argparse.Namespace, model: Path, data: Path, held: list[str]) -> Path:
    mix, mask = RUNS[name]
    out = args.out / "runs" / f"{name}-s{seed}"
    argv = ["finetune", str(model), "-m", "yarn", "-t", str(TARGET), "--pose", "--window", str(TRAINED),
            "--dataset", str(data), "--held-out", ",".join(held), "--steps", str(args.steps), "--seed", str(seed),
            "--lr", str(args.lr), "--warmup", str(args.warmup), "--batch-size", str(args.batch), "--grad-accum", "1",
            "--dtype", "fp32", "--short-mix", str(mix), "--doc-mask" if mask else "--no-doc-mask", "-o", str(out),
            "--force"]
    print(f"[{name} seed {seed}] -o {out}", file=sys.stderr, flush=True)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": str(args.threads)}
    with open(args.out / "runs" / f"{name}-s{seed}.log", "w", encoding="utf-8") as log:
        subprocess.run([sys.executable, "-m", "ropectl", *argv], check=True, env=env, stdout=log,
                       stderr=subprocess.STDOUT)
    check_held_out(out, held)
    return out


def documents(model: Path) -> dict[str, list[list[int]]]:
    """Token ids: the pydoc topics cut to 128 (those at least that long) and the held-out acts cut to 512."""
    from pydoc_data.topics import topics

    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    docs = [tok(topics[name]).input_ids for name in sorted(topics)]
    acts = [tok(p.read_text(encoding="utf-8")).input_ids for p in sorted((model / "heldout").glob("*.txt"))]
    return {"retention": [d[:TRAINED] for d in docs if len(d) >= TRAINED],
            "window": [d[:TRAINED] for d in acts if len(d) >= TRAINED],
            "extension": [d[:TARGET] for d in acts if len(d) >= TARGET]}


def score(folder: Path, docs: dict[str, list[list[int]]]) -> dict[str, list[float]]:
    """Per-document NLL sums (fp32, one forward each, plain transformers)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    out: dict[str, list[float]] = {}
    with torch.no_grad():
        for kind, rows in docs.items():
            ids = [torch.tensor([r]) for r in rows]
            out[kind] = [model(input_ids=x, labels=x).loss.item() * (x.shape[1] - 1) for x in ids]
    return out


def ratio(a: list[float], b: list[float], length: int, copies: int = 1) -> dict[str, float]:
    """PPL_a ÷ PPL_b over documents scored at ``length`` (``copies``: NLL sums over that many seeds)."""
    from ropectl.eval.stats import paired_log_ratio

    r = paired_log_ratio(a, b, [copies * (length - 1)] * len(a))
    return {"ratio": r.ratio, "lo": r.lo, "hi": r.hi, "n": len(a)}


def ppl(nll: list[float], length: int) -> float:
    return math.exp(sum(nll) / (len(nll) * (length - 1)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "finetune-mix")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--lr", type=float, default=2e-4)  # the recovery benchmark's (bench_finetune_recover.py)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--batch", type=int, default=4, help="sequences per step")
    parser.add_argument("--jobs", type=int, default=2, help="runs at once")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument("--rescore", action="store_true", help="score the run folders under OUT/runs again, no training")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    wall0 = time.perf_counter()
    model = tiny_model()
    data, held = (None, []) if args.rescore else prepare_data(model, args.out)
    docs = documents(model)
    (args.out / "runs").mkdir(parents=True, exist_ok=True)
    scores: dict[str, Any] = {"untrained": score(model, docs)}
    timing: dict[str, float] = {}
    lock = threading.Lock()

    def save() -> None:  # after every run: a partial benchmark still has the runs it finished
        result = {"machine": machine(), "load": os.getloadavg(), "model": str(model), "args": {
            k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}, "scores": scores,
            "docs": {k: len(v) for k, v in docs.items()}, "wall_s": timing,
            "total_wall_s": round(time.perf_counter() - wall0)}
        (args.out / "mix.json").write_text(json.dumps(result), encoding="utf-8")
        (args.out / "report.md").write_text(report(result, seeds), encoding="utf-8")

    def one(job: tuple[str, int]) -> None:
        t0 = time.perf_counter()
        out = finetune(*job, args, model, data, held)
        got = score(out, docs)
        with lock:
            scores[f"{job[0]}-s{job[1]}"] = got
            timing[f"{job[0]}-s{job[1]}"] = round(time.perf_counter() - t0, 1)
            save()

    if args.rescore:
        for name, seed in [(n, s) for s in seeds for n in RUNS]:
            if (args.out / "runs" / f"{name}-s{seed}" / "config.json").is_file():
                scores[f"{name}-s{seed}"] = score(args.out / "runs" / f"{name}-s{seed}", docs)
        old = json.loads((args.out / "mix.json").read_text(encoding="utf-8"))
        timing.update(old["wall_s"])
        wall0 -= old["total_wall_s"]
        save()
    else:
        with ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(one, [(n, s) for s in seeds for n in RUNS]))
    print((args.out / "report.md").read_text(encoding="utf-8"))


def report(result: dict[str, Any], seeds: list[int]) -> str:
    s = result["scores"]
    base = s["untrained"]
    kinds = [k for k in ("retention", "window", "extension") if k in base]
    size = {"retention": TRAINED, "window": TRAINED, "extension": TARGET}
    label = {"retention": "PPL@128 pydoc", "window": "PPL@128 acts", "extension": "PPL@512 acts"}
    lines = [f"documents: {result['docs']}; untrained: "
             + ", ".join(f"{label[k]} {ppl(base[k], size[k]):.2f}" for k in kinds), "",
             "| run | seed | " + " | ".join(f"{label[k]} (÷ untrained [95 % CI])" for k in kinds) + " |",
             "|---|---:|" + "---|" * len(kinds)]
    for name in RUNS:
        for seed in seeds:
            if f"{name}-s{seed}" not in s:
                continue
            r = s[f"{name}-s{seed}"]
            cells = []
            for k in kinds:
                q = ratio(r[k], base[k], size[k])
                cells.append(f"{ppl(r[k], size[k]):.2f} ({q['ratio']:.3f} [{q['lo']:.3f}, {q['hi']:.3f}])")
            lines.append(f"| {name} | {seed} | " + " | ".join(cells) + " |")
    lines += ["", "| option | against | seed | " + " | ".join(f"{label[k]} ratio [95 % CI]" for k in kinds) + " |",
              "|---|---|---:|" + "---|" * len(kinds)]
    for a, b in CONTRASTS:
        for seed in seeds:
            if f"{a}-s{seed}" not in s or f"{b}-s{seed}" not in s:
                continue
            x, y = s[f"{a}-s{seed}"], s[f"{b}-s{seed}"]
            qs = [ratio(x[k], y[k], size[k]) for k in kinds]
            lines.append(f"| {a} | {b} | {seed} | "
                         + " | ".join(f"{q['ratio']:.4f} [{q['lo']:.4f}, {q['hi']:.4f}]" for q in qs) + " |")
        have = [seed for seed in seeds if f"{a}-s{seed}" in s and f"{b}-s{seed}" in s]
        if len(have) > 1:  # per document, the NLL summed over the seeds; paired over documents
            qs = [ratio(*[[sum(vals) for vals in zip(*(s[f"{run}-s{seed}"][k] for seed in have))] for run in (a, b)],
                        size[k], len(have)) for k in kinds]
            lines.append(f"| {a} | {b} | pooled | "
                         + " | ".join(f"{q['ratio']:.4f} [{q['lo']:.4f}, {q['hi']:.4f}]" for q in qs) + " |")
    lines += ["", f"wall {result['total_wall_s']} s; runs {result['wall_s']}; load {result['load']}"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
