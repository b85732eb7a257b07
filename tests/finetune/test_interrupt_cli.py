"""SIGTERM through the real CLI: a checkpoint is saved, one line prints the command that resumes, and it does."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


@pytest.mark.slow
def test_sigterm_prints_the_command_that_resumes(ft_model: Path, ft_corpus: Path, isolated: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "OMP_NUM_THREADS": "1"}
    args = [str(ft_model), "-m", "yarn:4", "--dataset", str(ft_corpus), "-o", str(isolated / "out"), "--steps", "40",
            "--batch-size", "1", "--dtype", "fp32", "--device", "cpu"]
    proc = subprocess.Popen([sys.executable, "-m", "ropectl", "finetune", *args], cwd=isolated, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = isolated / "out.run" / "train_log.jsonl"
    deadline = time.monotonic() + 120
    while not (log.is_file() and log.read_text().count("\n") >= 2) and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-2000:]
    line = next(x for x in err.splitlines() if "resume with:" in x)
    assert line.startswith("terminated at step ")
    command = shlex.split(line.split("resume with: ", 1)[1])
    assert command[0] == "ropectl" and command[-1] == "--resume" and command.count("--resume") == 1
    assert any((isolated / "out.run").glob("checkpoint-*")) and not (isolated / "out").exists()
    done = subprocess.run([sys.executable, "-m", "ropectl", *command[1:]], cwd=isolated, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (isolated / "out" / "config.json").is_file() and not (isolated / "out.run").exists()
