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
