"""Run in the vLLM venv with this checkout on PYTHONPATH: ropectl's vLLM engine, driven as a task drives it.

Usage: python vllm_engine_probe.py JOB.json OUT.json. JOB is {"model", "method", "prompts", "spans"}; OUT gets
the engine's ``token_logprobs``, ``span_logprobs`` (the spans) and ``teacher_forced`` (answers from each
span's start to the prompt's end) for the prompts, and its record.
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace


def main() -> None:
    from ropectl.eval.engines import get_engine
    from ropectl.eval.settings import parse_methods
    from ropectl.runtime.model import method_states, model_source, trained_context

    job = json.loads(open(sys.argv[1]).read())
    source = model_source(job["model"])
    states = method_states(source.config, parse_methods([job["method"]]))
    engine = get_engine("vllm")(source, "cpu", "fp32", None, "probe")
    spec = SimpleNamespace(lengths=(max(len(p) for p in job["prompts"]),))
    sweep = SimpleNamespace(spec=spec, states=states, trained=trained_context(source.config), warnings=[])
    engine.check(sweep)
    engine.load_tokenizer()
    engine.load()
    engine.activate(states[0])
    spans = [tuple(s) for s in job["spans"]]
    out = {"token_logprobs": engine.token_logprobs(job["prompts"]),
           "answer_logprobs": engine.span_logprobs(job["prompts"], spans),
           "teacher_forced": engine.teacher_forced(job["prompts"], [start for start, _ in spans])}
    out["record"] = engine.record()
    engine.close()
    with open(sys.argv[2], "w") as fh:
        json.dump(out, fh)


if __name__ == "__main__":
    main()
