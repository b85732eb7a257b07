"""Run in the vLLM venv (it never imports ropectl): prompt log-probs and the max length vLLM derived, per job.

Usage: python vllm_runner.py JOBS.json OUT.json. Each job is {"name", "model", "hf_overrides", "tokens"} and
optionally "lora" (a peft adapter folder served on the model with enable_lora, as `vllm serve MODEL --enable-lora
--lora-modules NAME=DIR` does); the engine is built with no --max-model-len, so the length it reports is the one it
derived from the config.
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
    lora = {"enable_lora": True, "max_lora_rank": job.get("lora_rank", 8), "max_loras": 1} if job.get("lora") else {}
    try:
        llm = LLM(model=job["model"], hf_overrides=job.get("hf_overrides") or {}, dtype="float32",
                  enforce_eager=True, seed=0, max_num_seqs=1, max_num_batched_tokens=job.get("batch", 4096), **lora)
    except Exception as exc:  # the engine refusing the config is a result, not a crash
        return {"error": f"{type(exc).__name__}: {exc}"[:2000]}
    derived = int(llm.llm_engine.model_config.max_model_len)
    out = {"derived_max_model_len": derived}
    tokens = job["tokens"]
    if len(tokens) < derived:
        params = SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=0.0)
        request = None
        if job.get("lora"):
            from vllm.lora.request import LoRARequest

            request = LoRARequest("finetuned", 1, job["lora"])
        result = llm.generate([TokensPrompt(prompt_token_ids=tokens)], params, use_tqdm=False, lora_request=request)[0]
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
