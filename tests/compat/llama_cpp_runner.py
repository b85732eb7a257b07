"""Run in the llama.cpp venv (llama-cpp-python; never imports ropectl): per-token log-probs of one GGUF, one setting.

Usage: python llama_cpp_runner.py JOB.json OUT.json. The job is {"model", "text" or "tokens", "n_tokens", "params"}:
"tokens" are ids from another tokenizer (eval-ppl's), so both engines score the same sequence; params are
``Llama(...)`` keyword arguments, with ``rope_scaling_type`` given by name (none, linear, yarn). The verbose load
log (llama.cpp's own RoPE report) goes to stderr, where the caller reads it.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np


def _without_extra_buffers(llama_cpp) -> None:  # noqa: ANN001
    """Weights stay in plain CPU buffers: ggml's AMX repacking (the extra buffer type it picks on CPUs with AMX,
    as this build's -march=native has) segfaults in ggml_backend_amx_mul_mat on these machines. The plain path
    computes the same RoPE; only the matmul kernel differs."""
    defaults = llama_cpp.llama_model_default_params

    def params():  # noqa: ANN202
        out = defaults()
        out.use_extra_bufts = False
        return out

    llama_cpp.llama_model_default_params = params
    import llama_cpp.llama as module

    module.llama_cpp.llama_model_default_params = params


def main() -> None:
    import llama_cpp

    _without_extra_buffers(llama_cpp)
    job = json.loads(open(sys.argv[1]).read())
    params = dict(job["params"])
    if "rope_scaling_type" in params:
        name = params["rope_scaling_type"].upper()
        params["rope_scaling_type"] = getattr(llama_cpp, f"LLAMA_ROPE_SCALING_TYPE_{name}")
    n = int(job["n_tokens"])
    started = time.time()
    llm = llama_cpp.Llama(model_path=job["model"], n_ctx=max(n, int(params.pop("n_ctx", n))), n_batch=512,
                          n_ubatch=512, logits_all=True, verbose=True, n_threads=2, seed=0, **params)
    if "tokens" in job:
        tokens = [int(t) for t in job["tokens"]][:n]
    else:
        text = open(job["text"], encoding="utf-8").read()
        tokens = llm.tokenize(text.encode("utf-8"), add_bos=True)[:n]
    assert len(tokens) == n, f"the text has only {len(tokens)} tokens"
    llm.eval(tokens)
    scores = np.asarray(llm.scores[:n], dtype=np.float64)
    top = scores.max(axis=1, keepdims=True)
    logz = (top + np.log(np.exp(scores - top).sum(axis=1, keepdims=True)))[:, 0]
    ids = np.asarray(tokens[1:])
    logprobs = scores[np.arange(n - 1), ids] - logz[: n - 1]
    out = {"tokens": tokens, "logprobs": logprobs.tolist(), "seconds": round(time.time() - started, 1)}
    with open(sys.argv[2], "w") as fh:
        json.dump(out, fh)


if __name__ == "__main__":
    main()
