"""Run in the lm-eval venv (it never imports ropectl): what lm-eval's HFLM takes as a model's length, and whether a
loglikelihood request of a given length is scored whole.

Usage: python lm_eval_runner.py JOBS.json OUT.json. Each job is {"name", "model_args" (the --model_args string),
"tokens"}. The request is the text of ``tokens`` characters split in two; lm-eval scores the continuation, and
transformers scores the same ids with nothing cut, as the oracle.
"""

from __future__ import annotations

import random


def _text(n: int, seed: int = 3) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("abcdefghij klmnopqrstuvwxyz") for _ in range(n))


def run_job(job: dict) -> dict:
    import torch
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM
    from lm_eval.utils import simple_parse_args_string

    args = simple_parse_args_string(job["model_args"])
    lm = HFLM(**args, device="cpu", dtype="float32", batch_size=1)
    text = _text(job["tokens"] + 64)
    continuation, n = text[-16:], job["tokens"]
    context = text[:-16]
    while True:  # the context that makes lm-eval's own encoding of the pair exactly ``tokens`` ids
        context_ids, cont_ids = lm._encode_pair(context, continuation)
        extra = len(context_ids) + len(cont_ids) - n
        if extra == 0:
            break
        context = context[extra:] if extra > 0 else context
    request = Instance("loglikelihood", {}, (context, continuation), 0)
    (got, _), = lm.loglikelihood([request], disable_tqdm=True)
    ids, n_cont = context_ids + cont_ids, len(cont_ids)
    with torch.no_grad():
        logits = lm.model(torch.tensor([ids])).logits[0].float()
    logp = torch.log_softmax(logits[:-1], dim=-1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
    whole = float(logp[-n_cont:].sum())
    return {"max_length": int(lm.max_length), "request_tokens": len(ids), "loglikelihood": float(got),
            "whole": whole}


if __name__ == "__main__":
    from job_loop import main  # beside this script, on its sys.path

    main(run_job)
