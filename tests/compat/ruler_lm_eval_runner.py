"""Run in the lm-eval venv (it never imports ropectl): lm-evaluation-harness's own RULER tasks on a folder.

Usage: python ruler_lm_eval_runner.py JOBS.json OUT.json. Each job is {"name", "folder", "tasks" (lm-eval task
names, e.g. niah_single_1, ruler_vt), "length", "limit"}. lm-eval generates its RULER samples with the folder's
tokenizer (``metadata={"max_seq_lengths": [length]}``), generates greedily with ``hf`` (float32, batch 1, CPU)
and scores ``string_match_all``; OUT.json holds, per job and task, the mean score, the number of samples, and each
sample's score, references, prompt length and (cut) generation.
"""

from __future__ import annotations

import time


def run_job(job: dict) -> dict:
    from lm_eval import simple_evaluate

    length = int(job["length"])
    start = time.perf_counter()
    out = simple_evaluate(model="hf", model_args=f"pretrained={job['folder']},dtype=float32", tasks=list(job["tasks"]),
                          batch_size=1, device="cpu", limit=int(job["limit"]), log_samples=True,
                          metadata={"max_seq_lengths": [length]}, bootstrap_iters=0, random_seed=0,
                          numpy_random_seed=0, torch_random_seed=0)
    tasks = {}
    for task in job["tasks"]:
        samples = []
        for s in out["samples"][task]:
            doc = s["doc"]
            samples.append({"index": doc["index"], "score": float(s[str(length)]), "references": list(doc["outputs"]),
                            "tokens": int(doc["length"]), "generated": str(s["filtered_resps"][0])[:300]})
        scores = [x["score"] for x in samples]
        tasks[task] = {"score": sum(scores) / len(scores), "n": len(scores), "samples": samples}
    return {"tasks": tasks, "wall_s": round(time.perf_counter() - start, 1),
            "versions": {k: v for k, v in out.get("config", {}).items() if k in ("model", "batch_size")}}


if __name__ == "__main__":
    from job_loop import main  # beside this script, on its sys.path

    main(run_job)
