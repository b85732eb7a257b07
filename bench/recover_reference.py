"""The content-matched reference for PPL@512 ÷ PPL@128: the same tokens scored in one 512 window and in 128 windows.

An act's first 128 tokens (headings, the scene, who enters) are easier than its later text: the tiny model scores
PPL 32 on them and 43-47 on 128-token windows cut further in. So PPL over the first 512 tokens ÷ PPL over the first
128 has a floor set by the text, not by the model. The fair question is whether one 512-token window predicts the
same tokens better than four 128-token windows (fresh context each): a ratio below 1 means the model uses context past
its trained length. Scored on the same token positions (each 128 window's first token has no context, so those 3
positions are left out of the 512 window's sum too).

    .venv/bin/python bench/recover_reference.py MODEL_FOLDER... --heldout TINY_MODEL/heldout
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def token_nll(model: Any, ids: list[int]) -> Any:
    """Per-position NLL of ids[1:] given the prefix (one forward, fp32)."""
    import torch
    import torch.nn.functional as F

    x = torch.tensor([ids])
    logits = model(input_ids=x).logits[0, :-1].float()
    return F.cross_entropy(logits, x[0, 1:], reduction="none")


def reference(folder: Path, docs: list[list[int]], window: int, target: int) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    one, chunked, first = [], [], []
    with torch.inference_mode():
        for ids in docs:
            full = token_nll(model, ids[:target])  # full[i] predicts token i + 1
            keep = [i for i in range(target - 1) if (i + 1) % window != 0]  # tokens that start a chunk have no context
            one.append(float(full[keep].sum()))
            chunked.append(sum(float(token_nll(model, ids[s:s + window]).sum()) for s in range(0, target, window)))
            first.append(float(full[:window - 1].sum()))
    count = len(keep) * len(docs)
    return {"model": str(folder), "docs": len(docs), "tokens": count,
            "ppl_one_window": math.exp(sum(one) / count), "ppl_chunked": math.exp(sum(chunked) / count),
            "ppl_first_window": math.exp(sum(first) / ((window - 1) * len(docs))),
            "per_doc": [[a, b] for a, b in zip(one, chunked)], "count_per_doc": len(keep)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--heldout", type=Path, required=True)
    parser.add_argument("--window", type=int, default=128)
    parser.add_argument("--target", type=int, default=512)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    import torch
    from transformers import AutoTokenizer

    from ropectl.eval.stats import paired_log_ratio

    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(args.models[0])
    docs = [tok(p.read_text(encoding="utf-8"))["input_ids"] for p in sorted(args.heldout.glob("*.txt"))]
    rows = []
    for folder in args.models:
        r = reference(folder, docs, args.window, args.target)
        n = r["count_per_doc"]
        pr = paired_log_ratio([a for a, _ in r["per_doc"]], [b for _, b in r["per_doc"]], [n] * len(docs))
        r.update(ratio=pr.ratio, lo=pr.lo, hi=pr.hi)
        rows.append(r)
        print(f"{folder.name}: one {r['ppl_one_window']:.2f}, chunked {r['ppl_chunked']:.2f}, first-window "
              f"{r['ppl_first_window']:.2f}; one ÷ chunked {pr.ratio:.3f} [{pr.lo:.3f}, {pr.hi:.3f}]", flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows), encoding="utf-8")


if __name__ == "__main__":
    main()
