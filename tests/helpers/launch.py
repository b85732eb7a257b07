"""Running ``ropectl finetune`` in subprocesses: one process, or several under torchrun / accelerate launch."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

# The global batch is the same 2 sequences: 1 process accumulates 2 micro-batches, 2 processes average 1 each across
# gloo. Only the summation order differs, so fp32 weights agree to float32 rounding after 3 AdamW steps.
PARALLEL_ATOL = 1e-6


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def finetune_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "OMP_NUM_THREADS": "1"}


def run_finetune(prefix: list[str], args: list[str], cwd: Path) -> None:
    """``prefix -m ropectl finetune args`` must succeed; a failure shows the launcher's error lines and its last ones."""
    done = subprocess.run([*prefix, "-m", "ropectl", "finetune", *args], cwd=cwd, env=finetune_env(),
                          capture_output=True, text=True, timeout=300)
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower() or "signal" in line.lower()]
    assert done.returncode == 0, "\n".join([*errors[-30:], "--- last lines:", *done.stderr.splitlines()[-15:]])
