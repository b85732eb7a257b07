"""eval-passkey under torchrun (2 CPU processes, gloo): trials split across ranks, gathered equal to one process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ARGS = ["-m", "none", "-m", "yarn:2", "-l", "280,320", "--depths", "0,0.5,1", "--samples", "2", "--dtype", "fp32"]


def passkey(launcher: list[str], model: Path, out: Path) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [*launcher, "-m", "ropectl", "eval-passkey", str(model), *ARGS, "-o", str(out), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len([ln for ln in proc.stdout.splitlines() if ln.startswith("{")]) == 1  # only rank 0 prints
    return json.loads((out / "passkey.json").read_text())


@pytest.mark.slow
@pytest.mark.dist
def test_two_processes_equal_one(tiny_model: Path, tmp_path: Path) -> None:
    exe = Path(sys.executable).parent / "torchrun"
    if not exe.exists():
        pytest.skip("torchrun is not installed beside this Python")
    one = passkey([sys.executable], tiny_model, tmp_path / "one")
    two = passkey([str(exe), "--standalone", "--nproc_per_node", "2"], tiny_model, tmp_path / "two")
    assert len(one["results"]) == 2 * 2 * 3 * 2
    keys = ("method", "length", "depth", "trial", "key", "success", "predicted")
    assert [[r[k] for k in keys] for r in two["results"]] == [[r[k] for k in keys] for r in one["results"]]
    assert two["meta"]["world_size"] == 2
