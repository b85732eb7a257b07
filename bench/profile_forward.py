"""Where one scored forward spends its time, per dtype: matmuls, SDPA attention, everything else.

Loads SmolLM2-135M (the GGUF) once per dtype in this process and runs eval-ppl's chunked forward for each
dtype in turn, ``--rounds`` times, under ``torch.profiler``: the dtypes see the same spells of load from
other jobs, which a run per process would not.

    .venv/bin/python bench/profile_forward.py --length 8k --dtypes fp32,bf16 --rounds 1
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MATMULS = ("aten::mm", "aten::addmm", "aten::bmm")


def categorize(name: str) -> str:
    if name in MATMULS:
        return "matmul"
    return "attention" if "attention" in name else "other"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--length", default="8k")
    p.add_argument("--dtypes", default="fp32,bf16")
    p.add_argument("--rounds", type=int, default=1)
    args = p.parse_args()
    sys.path.insert(0, str(REPO))
    import torch
    from torch.profiler import ProfilerActivity, profile

    from ropectl.eval.engines.hf.loss import sequence_nll
    from ropectl.runtime.lengths import parse_length
    from ropectl.runtime.load import load_model
    from ropectl.runtime.model import default_model_path

    length = parse_length(args.length)
    path = default_model_path()
    models = {d: load_model(str(path.parent), {"gguf_file": path.name}, None, "cpu", d).model
              for d in args.dtypes.split(",")}
    ids = (torch.arange(length) * 7919 + 13) % 49152
    with torch.inference_mode():
        for model in models.values():
            sequence_nll(model, ids[:256])  # warm-up
        for r in range(args.rounds):
            for dtype, model in models.items():
                with profile(activities=[ProfilerActivity.CPU]) as prof:
                    start = time.perf_counter()
                    sequence_nll(model, ids)
                    wall = time.perf_counter() - start
                parts = {"matmul": 0.0, "attention": 0.0, "other": 0.0}
                for event in prof.key_averages():
                    parts[categorize(event.key)] += event.self_cpu_time_total / 1e6
                load = " ".join(f"{x:.2f}" for x in os.getloadavg())
                print(f"{dtype} round {r}: {wall:.1f} s ({length / wall:.0f} tok/s); "
                      + ", ".join(f"{k} {v:.1f} s" for k, v in parts.items()) + f"; load {load}", flush=True)


if __name__ == "__main__":
    main()
