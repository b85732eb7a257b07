"""`make finetune-smoke`: the path end to end on the real model, the embedded SmolLM2-135M GGUF (trained 8k).

PoSE + YaRN x4 (8k -> 32k) in a 2k window with LoRA (merged), tens of steps on the embedded plays; PPL at long lengths
and niah_single_1 before (the patched, untrained model) and after (the written folder, read as it is), through the
commands users run. PPL is measured on held-out plays only (``--held-out``: never trained on; their texts are written
to OUT/heldout and read by `eval-ppl -d`). On a CPU this is a smoke run: it proves the path and the folder, not a
recovery (that claim comes from the tiny model, bench/bench_finetune_recover.py, and from a GPU: bench/gpu_session.sh
runs this script at full scale). Each command's wall time goes into OUT/smoke.json.

    .venv/bin/python bench/finetune_smoke.py                              # 20 steps, PPL at 30k, niah at 16k
    python bench/finetune_smoke.py --window 8k --lora 0 --steps 60 --batch-size 4 --grad-accum 2 \\
        --ppl-lengths 8k,32k --niah-lengths 16k,32k --niah-trials 8 --eval-every 20      # a GPU, full fine-tune
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
METHOD = "yarn:4"
# 32,207 tokens: the first play eval-ppl reads and one long enough for 30k; held out of training by default.
HELD_OUT = "comedies/a-midsummer-night-s-dream"


def ropectl(args: list[str], timings: dict[str, float], label: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "ropectl", *args, "--json"]
    print("$ ropectl " + " ".join(args), file=sys.stderr, flush=True)
    start = time.perf_counter()
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(cmd, env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True)
    timings[label] = round(time.perf_counter() - start, 1)
    if proc.returncode != 0:
        raise SystemExit(f"{label} failed:\n{proc.stderr[-3000:]}")
    print(f"  {label}: {timings[label]:.0f} s", file=sys.stderr, flush=True)
    try:
        return json.loads(proc.stdout)
    except ValueError:
        return {"stdout": proc.stdout[-2000:]}


def write_held_out(ids: list[str], folder: Path) -> None:
    """The held-out plays as text files, so eval-ppl reads exactly them (and nothing the fine-tune saw)."""
    from ropectl.runtime.corpus import embedded_source

    folder.mkdir(parents=True, exist_ok=True)
    texts = dict(embedded_source().texts())
    for doc in ids:
        (folder / (doc.replace("/", "--") + ".md")).write_text(texts[doc], encoding="utf-8")


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=REPO / "runs" / "finetune-smoke")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--window", default="2k")
    p.add_argument("--lora", type=int, default=8, help="LoRA rank, merged into the output; 0 = full fine-tune")
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--eval-every", type=int, default=0, help="finetune --eval-every (0 = off)")
    p.add_argument("--held-out", default=HELD_OUT, help="comma-separated play ids, never trained on")
    p.add_argument("--ppl-lengths", default="30k")
    p.add_argument("--niah-lengths", default="16k")
    p.add_argument("--niah-trials", type=int, default=4)
    p.add_argument("--reuse-before", action="store_true", help="keep the before numbers of OUT/smoke.json")
    return p.parse_args()


def main() -> None:
    from ropectl.runtime.model import default_model_path

    args = parse()
    gguf = str(default_model_path())
    out, model = args.out, args.out / "model"
    held = args.held_out.split(",")
    write_held_out(held, out / "heldout")
    t: dict[str, float] = {}
    ppl = ["eval-ppl", "-l", args.ppl_lengths, "-d", str(out / "heldout"), "-n", str(len(held)), "--force"]
    niah = ["eval-tasks", "-T", "niah_single_1", "-l", args.niah_lengths, "-n", str(args.niah_trials), "--force"]
    train = ["finetune", gguf, "-m", METHOD, "--pose", "--window", args.window, "--steps", str(args.steps),
             "--batch-size", str(args.batch_size), "--grad-accum", str(args.grad_accum), "--held-out", args.held_out,
             "-o", str(model), "--force"]
    train += ["--lora", str(args.lora), "--merge"] if args.lora else []
    train += ["--eval-every", str(args.eval_every)] if args.eval_every else []
    old = out / "smoke.json"
    before = json.loads(old.read_text()) if args.reuse_before and old.is_file() else {}
    if before:  # the untrained model's numbers do not change between smoke runs: --reuse-before keeps them
        t.update({k: v for k, v in before["timings_s"].items() if k.endswith("_before")})
    result: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    result["ppl_before"] = before.get("ppl_before") or ropectl(
        [ppl[0], gguf, "-m", METHOD, *ppl[1:], "-o", str(out / "ppl-before")], t, "ppl_before")
    result["niah_before"] = before.get("niah_before") or ropectl(
        [niah[0], gguf, "-m", METHOD, *niah[1:], "-o", str(out / "niah-before")], t, "niah_before")
    result["finetune"] = ropectl(train, t, "finetune")
    result["ppl_after"] = ropectl([ppl[0], str(model), *ppl[1:], "-o", str(out / "ppl-after")], t, "ppl_after")
    result["niah_after"] = ropectl([niah[0], str(model), *niah[1:], "-o", str(out / "niah-after")], t, "niah_after")
    result["timings_s"] = t
    result["total_s"] = round(sum(t.values()), 1)
    (out / "smoke.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    print(f"wrote {out / 'smoke.json'}; {result['total_s'] / 60:.1f} min in all", file=sys.stderr)


if __name__ == "__main__":
    main()
