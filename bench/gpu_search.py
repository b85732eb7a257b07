"""GPU timing of search trials: one trial (state build + rotary rebuild + scored forward through the transformers
engine) against one eval-ppl forward, and a short LongRoPE evolution end to end. Self-contained: needs torch,
transformers and this repository on PYTHONPATH; no download (random weights of the named shapes: timing only, the
PPL values mean nothing). Writes $OUT/gpu_search.json (and prints it). About 2-4 minutes on one H100.

    PYTHONPATH=. python bench/gpu_search.py                 # SmolLM2-135M and Llama-3.2-1B shapes, 8k-32k
    PYTHONPATH=. python bench/gpu_search.py --shapes smollm2 --lengths 8k,16k --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SMOLLM2 = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
               num_key_value_heads=3, max_position_embeddings=8192, rope_theta=100000.0, tie_word_embeddings=True,
               rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2)
LLAMA_1B = dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                num_attention_heads=32, num_key_value_heads=8, head_dim=64, max_position_embeddings=8192,
                rope_theta=500000.0, tie_word_embeddings=True, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2)
TINY = dict(vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=256, rope_theta=10000.0, tie_word_embeddings=True)
# Both real shapes are "trained" at 8k here, so 16k and 32k are 2x and 4x; tiny is for a CPU dry run of the script.
SHAPES = {"smollm2": SMOLLM2, "llama-1b": LLAMA_1B, "tiny": TINY}


def engine_for(shape: str, device: str):
    """The transformers engine around a random-init model of ``shape`` (bf16, SDPA), as eval-ppl would hold it."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from ropectl.eval.engines import get_engine
    from ropectl.runtime.load import LoadedModel

    torch.manual_seed(0)
    config = LlamaConfig(**SHAPES[shape], attn_implementation="sdpa")
    with torch.device(device):  # bf16 weights; the rotary inv_freq stays fp32 as from_pretrained leaves it
        model = LlamaForCausalLM._from_config(config, dtype=torch.bfloat16).eval()
    engine = get_engine("transformers")(None, device, "bf16", command="bench")
    engine.loaded = LoadedModel(model, None, device, "bf16")
    return engine, model.config.to_dict()


def timed(fn) -> float:
    import torch

    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    sync()
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start


def one_length(engine, config: dict, rope, length: int, rounds: int, rng: random.Random) -> dict:
    from ropectl.eval.engines import SequenceNLL
    from ropectl.rope.methods import MethodSpec
    from ropectl.runtime.model import method_states
    from ropectl.search.longrope import seed_factors

    tokens = [rng.randrange(100, 40000) for _ in range(length)]
    factor = max(length / rope.max_position_embeddings, 2.0)  # within the trained context: a trial's in-window check
    base = method_states(config, (MethodSpec("yarn", factor),))[0]
    yarn = seed_factors("yarn", rope, int(round(rope.max_position_embeddings * factor)))
    score = lambda: engine.sequence_nll([SequenceNLL(tokens, (length,))])  # noqa: E731
    engine.activate(base)
    warm = timed(score)
    fwd, tri = [], []
    for _ in range(rounds):
        engine.activate(base)
        fwd.append(timed(score))
        long = sorted(min(factor, max(1.0, round(v * rng.uniform(0.95, 1.05), 2))) for v in yarn)
        spec = MethodSpec("longrope", factor, (("short_factor", [1.0] * len(long)), ("long_factor", long)))
        tri.append(timed(lambda spec=spec: (engine.activate(method_states(config, (spec,))[0]), score())))
    return {"length": length, "warmup_s": warm, "forward_s": fwd, "trial_s": tri,
            "forward_median_s": statistics.median(fwd), "trial_median_s": statistics.median(tri),
            "trial_over_forward": statistics.median(tri) / statistics.median(fwd),
            "trials_per_hour_1doc": 3600 / statistics.median(tri)}


def short_evolution(engine, config: dict, rope, length: int, population: int, iterations: int) -> dict:
    """ropectl.search.longrope.evolve end to end, fitness = PPL of one random-token document at ``length``."""
    import math

    from ropectl.eval.engines import SequenceNLL
    from ropectl.rope.methods import MethodSpec
    from ropectl.runtime.model import method_states
    from ropectl.search.longrope import evolve, seed_factors

    rng = random.Random(1)
    tokens = [rng.randrange(100, 40000) for _ in range(length)]
    factor = length / rope.max_position_embeddings

    def fitness(long: tuple[float, ...]) -> float:
        spec = MethodSpec("longrope", factor, (("short_factor", [1.0] * len(long)), ("long_factor", list(long))))
        engine.activate(method_states(config, (spec,))[0])
        got = engine.sequence_nll([SequenceNLL(tokens, (length,))])[0]
        return math.exp(got.sums[0] / got.counts[0])

    seeds = [seed_factors(m, rope, length) for m in ("yarn", "ntk", "linear")]
    start = time.perf_counter()
    result = evolve(fitness, seeds, factor, population=population, iterations=iterations, seed=0)
    wall = time.perf_counter() - start
    return {"length": length, "population": population, "iterations": iterations, "trials": len(result.trials),
            "wall_s": wall, "trials_per_hour": 3600 * len(result.trials) / wall, "best_fitness": result.best_fitness}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="smollm2,llama-1b")
    ap.add_argument("--lengths", default="8k,16k,32k")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--evolve", default="16k:8:3", help="LENGTH:POPULATION:ITERATIONS on the first shape ('' = skip)")
    args = ap.parse_args()
    out_dir = Path(os.environ.get("OUT", "."))
    report: dict = {"args": vars(args), "shapes": {}, "errors": []}
    try:
        import torch
        import transformers

        from ropectl.runtime.lengths import parse_length, parse_lengths
        from ropectl.schema.read import read_model_rope

        cuda = args.device.startswith("cuda")
        report.update(device=torch.cuda.get_device_name(0) if cuda else args.device, torch=torch.__version__,
                      transformers=transformers.__version__)
        for shape in args.shapes.split(","):
            engine, config = engine_for(shape, args.device)
            rope = read_model_rope(config).rope
            rows = []
            for n in parse_lengths(args.lengths):
                rows.append(one_length(engine, config, rope, n, args.rounds, random.Random(n)))
                print(json.dumps({shape: rows[-1]}), flush=True)
            peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else None
            report["shapes"][shape] = {"rows": rows, "peak_gib": peak}
            if args.evolve and shape == args.shapes.split(",")[0]:
                length, population, iterations = args.evolve.split(":")
                report["evolve"] = short_evolution(engine, config, rope, parse_length(length), int(population),
                                                   int(iterations))
                print(json.dumps({"evolve": report["evolve"]}), flush=True)
            del engine
            if cuda:
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
    except Exception:  # the JSON still comes back, with what failed
        report["errors"].append(traceback.format_exc())
    (out_dir / "gpu_search.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
