"""The embedded search demo: SmolLM2-135M (trained 8k) searched for 16k on this CPU, within a stated budget.

``ropectl search`` with its defaults costs far more than a CPU demo can spend (10 closed-form references, 3 search
and 6 held-out documents, 2 needles, 20 trials of 3-4 forwards each at 8k-16k). This script runs the same code
(``ropectl.search.output.run_search``) with the sizes cut and says which: the closed-form grid at target/trained
only, no pruning length below the target, 1 search document, 2 held out, 1 needle, a trial budget and a time cap.
It writes OUT/search.json and the plots (the command's own outputs) plus OUT/demo.json (machine, dtype, sizes,
wall time).

    .venv/bin/python bench/search_demo.py -t 16k --space yarn --trials 4 --minutes 30 -o runs/search-demo-16k
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("-t", "--target", default="16k")
    ap.add_argument("--space", default="yarn")
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--docs", type=int, default=1)
    ap.add_argument("--held-out", type=int, default=2)
    ap.add_argument("--samples", type=int, default=1)
    ap.add_argument("--population", type=int, default=4)
    ap.add_argument("--iterations", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prune-at", default="", help="pruning lengths below the target, e.g. 12k (default: none)")
    ap.add_argument("-o", "--out", type=Path, required=True)
    args = ap.parse_args()

    from bench_search import cpu_flags

    from ropectl.runtime.lengths import parse_length
    from ropectl.search.output import run_search
    from ropectl.search.run import SearchRequest
    from ropectl.search.spaces import build_space

    target = parse_length(args.target)
    prune = tuple(parse_length(x) for x in args.prune_at.split(",") if x)
    # the loop options this space takes (a box: --trials; longrope: --population, --iterations); search refuses others
    takes = build_space(args.space, 2.0).takes
    loop = {k: getattr(args, k) for k in ("trials", "population", "iterations") if f"--{k}" in takes}
    req = SearchRequest(model=args.model, target=target, space=args.space, out=args.out, minutes=args.minutes,
                        docs=args.docs, held_out=args.held_out, samples=args.samples, seed=args.seed,
                        lengths=(*prune, target), grid=(1.0,), **loop)
    start = time.perf_counter()
    result = run_search(req, lambda line: print(line, file=sys.stderr, flush=True))
    wall = time.perf_counter() - start
    for line in result.lines:
        print(line)
    print(f"best.spec: {result.spec}")
    import torch

    demo = {"machine": cpu_flags(), "threads": torch.get_num_threads(), "wall_s": wall,
            "sizes": {k: v for k, v in vars(args).items() if k != "out"} | {"grid": [1.0], "prune_at": [*prune, target]},
            "best_spec": result.spec}
    (args.out / "demo.json").write_text(json.dumps(demo, indent=2) + "\n", encoding="utf-8")
    print(f"wall {wall / 60:.1f} min")


if __name__ == "__main__":
    main()
