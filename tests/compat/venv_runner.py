"""The engine tiers' one way to run a runner script in an engine's venv: jobs in, results JSON out. The runner
itself is ropectl's (``ropectl.verify.remote.run_jobs``, what ``verify --engine-python`` uses); here a runner that
produced nothing fails the test with its stderr."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ropectl.errors import EngineError
from ropectl.verify.remote import OFFLINE
from ropectl.verify.remote import run_jobs as _run_jobs

__all__ = ["OFFLINE", "run_jobs"]


def run_jobs(python: Path, runner: Path, jobs: list[dict[str, Any]], work: Path,
             env: dict[str, str] | None = None) -> dict[str, Any]:
    """``python runner JOBS.json OUT.json`` in ``work``, offline, with this checkout kept off PYTHONPATH unless
    ``env`` sets one; the runner writes OUT.json after each job, so a crash keeps the earlier results."""
    try:
        return _run_jobs(python, runner, jobs, work, env, timeout=1800)
    except EngineError as exc:
        raise AssertionError(f"{Path(runner).name} produced nothing: {getattr(exc, 'stderr', '')[-3000:]}") from None
