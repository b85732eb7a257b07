"""Running a job in another venv's Python: vLLM and SGLang pin their own torch and transformers, so a user keeps
them in a venv of their own and names its Python (``--engine-python ENGINE=PATH``); the engine tiers run their
runner scripts the same way (tests/compat/venv_runner.py uses ``run_jobs``).

``run_jobs``: ``python SCRIPT JOBS.json OUT.json`` (or ``python -m MODULE ...``), offline, in a scratch folder that is
removed afterwards; the script writes OUT.json after each job, so a crash keeps the earlier results. ``run_worker``
runs ropectl's own ``worker`` module there, importing ropectl from this installation (PYTHONPATH): the other venv
needs ropectl's dependencies, not ropectl.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from ropectl.errors import EngineError

OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONWARNINGS": "ignore"}
TIMEOUT_S = 3600


def run_jobs(python: Path, runner: Path | str, jobs: list[dict[str, Any]], work: Path,
             env: dict[str, str] | None = None, timeout: float = TIMEOUT_S) -> dict[str, Any]:
    """``python runner JOBS.json OUT.json`` in ``work`` (``runner`` a path, or ``-m MODULE``), offline, with this
    process's PYTHONPATH dropped unless ``env`` sets one."""
    (work / "jobs.json").write_text(json.dumps(jobs))
    full = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | OFFLINE | (env or {})
    script = str(runner).split() if str(runner).startswith("-m ") else [str(runner)]
    try:
        proc = subprocess.run([str(python), *script, str(work / "jobs.json"), str(work / "out.json")],
                              capture_output=True, text=True, env=full, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EngineError(f"'{python}' did not run ({type(exc).__name__}: {exc})",
                          "check the path given to --engine-python (a venv's bin/python)") from None
    if not (work / "out.json").exists():
        tail = [line for line in proc.stderr.strip().splitlines() if line.strip()][-1:] or ["no output"]
        error = EngineError(f"'{python}' produced nothing (exit {proc.returncode}: {tail[0][:300]})",
                            "check that this Python has the engine and ropectl's dependencies (torch, transformers)")
        error.stderr = proc.stderr  # type: ignore[attr-defined]  (the tiers print its tail)
        raise error
    return json.loads((work / "out.json").read_text())


def run_worker(python: str, job: dict[str, Any]) -> dict[str, Any]:
    """One verify job (``score.Job``) run by ``python`` importing ropectl from here; the answer, or the refusal the
    job raised there, re-raised here as one line."""
    import ropectl

    path = Path(python).expanduser()
    if not path.is_file():
        raise EngineError(f"--engine-python {job['engine']}={python}: no such file",
                          f"pass the Python of the venv that has {job['engine']} (e.g. ~/venvs/{job['engine']}/bin/python)")
    root = str(Path(ropectl.__file__).resolve().parent.parent)
    with tempfile.TemporaryDirectory(prefix="ropectl-verify-") as work:
        got = run_jobs(path, "-m ropectl.verify.worker", [job], Path(work), env={"PYTHONPATH": root})
    answer = got.get("job", {})
    if "error" in answer:
        raise EngineError(answer["error"], answer.get("fix") or "see the engine's own message")
    return answer
