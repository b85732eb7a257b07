"""Run in the lm-eval venv (it never imports ropectl): lm-evaluation-harness's own RULER tasks on a folder.

Usage: python ruler_lm_eval_runner.py JOBS.json OUT.json. Each job is {"name", "folder", "tasks" (lm-eval task
names, e.g. niah_single_1, ruler_vt), "length", "limit", optionally "threads" (torch's)}. lm-eval generates its
RULER samples with the folder's tokenizer (``metadata={"max_seq_lengths": [length]}``), only the first ``limit``
of them (cap_samples), generates greedily with HFLM (float32, batch 1, CPU; the yaml's max_gen_toks, stopping at
EOS) and scores ``string_match_all``, one ``simple_evaluate`` per task; OUT.json holds, per job and task, the mean
score, the number of samples, and each sample's score, references, token count (prompt and generation budget, as
lm-eval records it) and (cut) generation.
"""

from __future__ import annotations

import inspect
import random
import time
from pathlib import Path
from typing import Any

# lm-eval's RULER loaders draw 500 samples per task when the dataset is built, whatever `limit` is: the
# generator each loader module calls, by the name it calls it under there.
SAMPLERS = {"niah_utils": "generate_samples", "cwe_utils": "sys_word_pair_random", "fwe_utils": "sys_kwext",
            "vt_utils": "sys_vartrack_w_noise_random"}


def cap_samples(limit: int) -> list[int]:
    """Cap every RULER sampler's ``num_samples`` at ``limit``; returns the list each capped call appends to.

    The cap draws exactly lm-eval's first ``limit`` samples: each sampler sizes its haystack first (independent
    of num_samples), then draws sample after sample in one loop from the global ``random`` / ``np.random``
    state that ``simple_evaluate`` seeds, so stopping early leaves the earlier samples as they were (checked:
    capped and uncapped loaders give identical first samples for the six tasks). That holds per task only,
    since the tasks of one ``simple_evaluate`` share that state: run_job evaluates one task per call.
    vt's one-sample in-context example call (num_samples=1) passes through unchanged.
    """
    import lm_eval.tasks
    from lm_eval.tasks import _yaml_loader

    # `!function niah_utils.x` loads the module through this cache (keyed by name and mtime) and reuses it,
    # so the sampler replaced here is the one the task's loader calls
    ruler = Path(lm_eval.tasks.__file__).parent / "ruler"
    calls: list[int] = []
    for module_name, name in SAMPLERS.items():
        module = _yaml_loader._load_module_with_cache((ruler / f"{module_name}.py").resolve())
        original = getattr(module, name)
        default = inspect.signature(original).parameters["num_samples"].default

        def capped(*args: Any, _original: Any = original, _default: Any = default, **kwargs: Any) -> Any:
            kwargs["num_samples"] = min(int(kwargs.get("num_samples", _default)), limit)
            calls.append(kwargs["num_samples"])
            return _original(*args, **kwargs)

        setattr(module, name, capped)
    return calls


def evaluate_task(model: Any, manager: Any, task: str, length: int, limit: int) -> dict:
    """One task in its own simple_evaluate, so its samples are those `lm_eval --tasks TASK` draws (seeds 0)."""
    from lm_eval import simple_evaluate

    out = simple_evaluate(model=model, tasks=[task], limit=limit, log_samples=True, bootstrap_iters=0,
                          task_manager=manager, random_seed=0, numpy_random_seed=0, torch_random_seed=0)
    samples = []
    for s in out["samples"][task]:
        doc = s["doc"]
        samples.append({"index": doc["index"], "score": float(s[str(length)]), "references": list(doc["outputs"]),
                        "tokens": int(doc["length"]), "generated": str(s["filtered_resps"][0])[:300]})
    scores = [x["score"] for x in samples]
    return {"score": sum(scores) / len(scores), "n": len(scores), "samples": samples}


def run_job(job: dict) -> dict:
    import numpy as np
    import torch
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    if job.get("threads"):
        torch.set_num_threads(int(job["threads"]))
    length, limit = int(job["length"]), int(job["limit"])
    start = time.perf_counter()
    calls = cap_samples(limit)
    # simple_evaluate seeds before it builds a named model; one model built here serves every task, which draws
    # the same samples only while building it leaves the RNGs the loaders use alone
    states = random.getstate(), np.random.get_state()[1].tolist()
    # Where the time goes (measured per sample, one thread): the prefill of 550-1,000 tokens, 2-5 s, then about
    # 0.05 s per generated token. Generation stops at EOS (NIAH: about 10 tokens, " 8284194." and EOS) and runs
    # to the yaml's max_gen_toks otherwise (vt 30, cwe 120, fwe 50 tokens: SmolLM2 repeats itself there). Batch 1
    # stays: a batch left-pads its prompts, which can change the greedy answers, not only the time
    model = HFLM(pretrained=job["folder"], dtype="float32", batch_size=1, device="cpu")
    assert (random.getstate(), np.random.get_state()[1].tolist()) == states, "building HFLM drew random numbers"
    # one index of lm-eval's task folders (about 10 s) for every task; the RULER loaders take their tokenizer from
    # `pretrained`, which a model_args string would have put in the metadata
    manager = TaskManager(metadata={"pretrained": job["folder"], "max_seq_lengths": [length]})
    tasks, walls = {}, {}
    for task in job["tasks"]:
        begin = time.perf_counter()
        tasks[task] = evaluate_task(model, manager, task, length, limit)
        walls[task] = round(time.perf_counter() - begin, 1)
    return {"tasks": tasks, "wall_s": round(time.perf_counter() - start, 1), "task_wall_s": walls,
            "sampler_calls": calls, "threads": torch.get_num_threads(), "cpu_s": round(time.process_time(), 1)}


if __name__ == "__main__":
    from job_loop import main  # beside this script, on its sys.path

    main(run_job)
