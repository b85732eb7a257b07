"""Data parallelism: 2 CPU processes under torchrun (gloo) train exactly what 1 process does with the same global batch."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

# The global batch is the same 2 sequences: 1 process accumulates 2 micro-batches, 2 processes average 1 each across
# gloo's all-reduce. Only the summation order differs, so fp32 weights agree to float32 rounding after 3 AdamW steps.
DDP_ATOL = 1e-6


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(prefix: list[str], args: list[str], cwd: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([*prefix, "-m", "ropectl", "finetune", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower() or "signal" in line.lower()]
    assert done.returncode == 0, "\n".join([*errors[-30:], "--- last lines:", *done.stderr.splitlines()[-15:]])


@pytest.mark.slow
@pytest.mark.dist
def test_two_process_ddp_equals_one_process(ft_model: Path, ft_corpus: Path, isolated: Path) -> None:
    from safetensors.torch import load_file

    args = [str(ft_model), "-m", "yarn:4", "--data", str(ft_corpus), "--steps", "3", "--batch-tokens", "128",
            "--dtype", "fp32", "--device", "cpu", "--lr", "1e-3", "--json"]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                str(_free_port())]
    _run(torchrun, [*args, "-o", str(isolated / "two")], isolated)
    _run([sys.executable], [*args, "-o", str(isolated / "one")], isolated)
    one, two = load_file(str(isolated / "one" / "model.safetensors")), load_file(str(isolated / "two" / "model.safetensors"))
    base = load_file(str(ft_model / "model.safetensors"))
    assert one.keys() == two.keys()
    moved = max(float((one[k] - base[k]).abs().max()) for k in base)
    assert moved > 100 * DDP_ATOL  # negative control: training changed the weights far beyond the tolerance
    for name in one:
        assert float((one[name] - two[name]).abs().max()) <= DDP_ATOL, name
