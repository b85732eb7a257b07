"""The loop every engine runner script shares (it runs in the engine's venv, beside the runner, never importing
ropectl): read JOBS.json, run each job, write OUT.json after each one so a crash keeps the earlier results."""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from typing import Any


def main(run_job: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    jobs = json.loads(open(sys.argv[1]).read())
    results = {}
    for job in jobs:
        try:
            results[job["name"]] = run_job(job)
        except Exception as exc:  # a refusal is a result
            results[job["name"]] = {"error": f"{type(exc).__name__}: {exc}"[:2000],
                                    "traceback": traceback.format_exc()[-3000:]}
        with open(sys.argv[2], "w") as fh:
            json.dump(results, fh)
