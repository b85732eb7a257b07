"""The RULER-style trials the eval-tasks tests build: every task name, and the trials of a spec."""

from __future__ import annotations

# RULER's task names, typed from lm-eval's ruler group (plus passkey)
TASKS = ["niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multikey_2", "niah_multikey_3",
         "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe", "passkey"]


def trials_for(tok, tasks: list[str], lengths: str, samples: int, seed: int = 0):
    from ropectl.eval.tasks.ruler.runner import build_trials
    from ropectl.eval.tasks.ruler.spec import build_tasks_spec
    from ropectl.runtime.corpus import make_source

    spec = build_tasks_spec(model="x", tasks=",".join(tasks), lengths=lengths, samples=samples, seed=seed)
    return build_trials(tok, spec, (t for _, t in make_source(None).texts()))
