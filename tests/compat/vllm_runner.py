"""Run in the vLLM venv (it never imports ropectl): prompt log-probs and the max length vLLM derived, per job.

Usage: python vllm_runner.py JOBS.json OUT.json. Each job is {"name", "model", "hf_overrides", "tokens"}; the
engine is built with no --max-model-len, so the length it reports is the one it derived from the config.
"""

from __future__ import annotations

import gc
import json
import math
import sys
import time


def run_job(job: dict) -> dict:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    started = time.time()
    try:
        llm = LLM(model=job["model"], hf_overrides=job.get("hf_overrides") or {}, dtype="float32",
                  enforce_eager=True, seed=0, max_num_seqs=1, max_num_batched_tokens=job.get("batch", 4096))
    except Exception as exc:  # the engine refusing the config is a result, not a crash
        return {"error": f"{type(exc).__name__}: {exc}"[:2000]}
    derived = int(llm.llm_engine.model_config.max_model_len)
    out = {"derived_max_model_len": derived}
    tokens = job["tokens"]
    if len(tokens) < derived:
        params = SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=0.0)
        result = llm.generate([TokensPrompt(prompt_token_ids=tokens)], params, use_tqdm=False)[0]
        logprobs = []
        for tok, entry in zip(tokens[1:], result.prompt_logprobs[1:]):
            value = entry[tok].logprob if entry and tok in entry else float("nan")
            logprobs.append(value if math.isfinite(value) else None)
        out["logprobs"] = logprobs
    else:
        out["error"] = f"derived max length {derived} leaves no room for {len(tokens)} prompt tokens"
    out["seconds"] = round(time.time() - started, 1)
    del llm
    gc.collect()
    return out


def main() -> None:
    jobs = json.loads(open(sys.argv[1]).read())
    results = {}
    for job in jobs:
        results[job["name"]] = run_job(job)
        with open(sys.argv[2], "w") as fh:  # written after each job: a crash keeps the earlier results
            json.dump(results, fh)


if __name__ == "__main__":
    main()
