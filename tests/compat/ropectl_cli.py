"""The engine tiers' one way to run ropectl: the real CLI of this checkout, in a subprocess, with --json."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def ropectl_json(*args: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "ropectl", *args, "--json"], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def ropectl_try(*args: str) -> tuple[int, dict[str, Any] | None, str]:
    """(exit code, the --json result or None, stderr): for commands that may refuse."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "ropectl", *args, "--json"], capture_output=True, text=True, env=env)
    return proc.returncode, json.loads(proc.stdout) if proc.returncode == 0 else None, proc.stderr


def printed_vllm_overrides(warnings: list[str]) -> dict[str, Any]:
    """The --hf-overrides of the `vllm serve ...` command a patch warning printed (to serve the target, or to cap a
    longer length), as printed; empty when none was."""
    import shlex

    for w in warnings:
        for lead in ("serve it with: ", "to cap it there: "):
            if lead + "vllm serve" in w:
                args = shlex.split(w.split(lead, 1)[1])
                return json.loads(args[args.index("--hf-overrides") + 1])
    return {}
