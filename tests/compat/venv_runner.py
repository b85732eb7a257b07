"""The engine tiers' one way to run a runner script in an engine's venv: jobs in, results JSON out."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONWARNINGS": "ignore"}


def run_jobs(python: Path, runner: Path, jobs: list[dict[str, Any]], work: Path,
             env: dict[str, str] | None = None) -> dict[str, Any]:
    """``python runner JOBS.json OUT.json`` in ``work``, offline, with this checkout kept off PYTHONPATH unless
    ``env`` sets one; the runner writes OUT.json after each job, so a crash keeps the earlier results."""
    (work / "jobs.json").write_text(json.dumps(jobs))
    full = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | OFFLINE | (env or {})
    proc = subprocess.run([str(python), str(runner), str(work / "jobs.json"), str(work / "out.json")],
                          capture_output=True, text=True, env=full, timeout=1800)
    if not (work / "out.json").exists():
        raise AssertionError(f"{runner.name} produced nothing (exit {proc.returncode}): {proc.stderr[-3000:]}")
    return json.loads((work / "out.json").read_text())
