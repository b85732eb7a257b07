"""`make finetune-smoke`: the path end to end on the real model, the embedded SmolLM2-135M GGUF (trained 8k).

PoSE + YaRN x4 (8k -> 32k) in a 2k window with LoRA (merged), tens of steps on the embedded plays; PPL at a long length
and niah_single_1 at 16k, before (the patched, untrained model) and after (the written folder, read as it is), through
the commands users run. A smoke run: it proves the path and the folder, not a recovery (that claim comes from the tiny
model, bench/bench_finetune_recover.py, and from a GPU). Each command's wall time goes into OUT/smoke.json.

    .venv/bin/python bench/finetune_smoke.py                       # PPL at 16k, niah at 16k, 20 steps
    .venv/bin/python bench/finetune_smoke.py --ppl-length 30k      # PPL at 30k as well (slow on CPU: measure first)
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


def ropectl(args: list[str], timings: dict[str, float], label: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "ropectl", *args, "--json"]
    print("$ ropectl " + " ".join(args), file=sys.stderr, flush=True)
    start = time.perf_counter()
    proc = subprocess.run(cmd, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True)
    timings[label] = round(time.perf_counter() - start, 1)
    if proc.returncode != 0:
        raise SystemExit(f"{label} failed:\n{proc.stderr[-3000:]}")
    print(f"  {label}: {timings[label]:.0f} s", file=sys.stderr, flush=True)
    try:
        return json.loads(proc.stdout)
    except ValueError:
        return {"stdout": proc.stdout[-2000:]}


def main() -> None:
    from ropectl.eval.model import default_model_path

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "finetune-smoke")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--ppl-length", default="16k")
    parser.add_argument("--niah-length", default="16k")
    parser.add_argument("--niah-trials", type=int, default=4)
    parser.add_argument("--reuse-before", action="store_true", help="keep the before numbers of OUT/smoke.json")
    args = parser.parse_args()
    gguf = str(default_model_path())
    out, model = args.out, args.out / "model"
    out.mkdir(parents=True, exist_ok=True)
    t: dict[str, float] = {}
    ppl = ["eval-ppl", "-l", args.ppl_length, "-n", "1", "--force"]
    niah = ["eval-tasks", "-T", "niah_single_1", "-l", args.niah_length, "-n", str(args.niah_trials), "--force"]
    before = json.loads((out / "smoke.json").read_text()) if args.reuse_before and (out / "smoke.json").is_file() else {}
    if before:  # the untrained model's numbers do not change between smoke runs: --reuse-before keeps them
        t.update({k: v for k, v in before["timings_s"].items() if k.endswith("_before")})
    result = {
        "ppl_before": before.get("ppl_before") or ropectl([*ppl[:1], gguf, "-m", METHOD, *ppl[1:], "-o",
                                                          str(out / "ppl-before")], t, "ppl_before"),
        "niah_before": before.get("niah_before") or ropectl([*niah[:1], gguf, "-m", METHOD, *niah[1:], "-o",
                                                            str(out / "niah-before")], t, "niah_before"),
        "finetune": ropectl(["finetune", gguf, "-m", METHOD, "--pose", "--window", "2k", "--lora", "8", "--merge",
                             "--steps", str(args.steps), "--batch-size", "1", "--grad-accum", "1", "--held-out", "1",
                             "-o", str(model), "--force"], t, "finetune"),
        "ppl_after": ropectl([*ppl[:1], str(model), *ppl[1:], "-o", str(out / "ppl-after")], t, "ppl_after"),
        "niah_after": ropectl([*niah[:1], str(model), *niah[1:], "-o", str(out / "niah-after")], t, "niah_after"),
    }
    result["timings_s"] = t
    result["total_s"] = round(sum(t.values()), 1)
    (out / "smoke.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    print(f"wrote {out / 'smoke.json'}; {result['total_s'] / 60:.1f} min in all", file=sys.stderr)


if __name__ == "__main__":
    main()
