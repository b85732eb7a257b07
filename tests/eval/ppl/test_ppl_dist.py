"""Two CPU processes (torchrun or accelerate launch, gloo) split the documents and gather exactly what one process computes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ARGS = ["-m", "none", "-m", "yarn:2", "-m", "dynamic:2", "-l", "64,200,400"]


def ropectl(launcher: list[str], model: Path, corpus: Path, out: Path, cache: Path) -> dict:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "OMP_NUM_THREADS": "1"}
    cmd = [*launcher, "-m", "ropectl", "eval-ppl", str(model), "-d", str(corpus), *ARGS, "-o", str(out), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(printed) == 1, proc.stdout  # only rank 0 prints
    return json.loads((out / "results.json").read_text())


LAUNCHERS = {
    "torchrun": ["torchrun", "--standalone", "--nproc_per_node", "2"],
    # accelerate's multi-process launcher is torch.distributed.run underneath; --cpu would select its MPI path.
    "accelerate": ["accelerate", "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
                   "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "0"],
}


@pytest.mark.slow
@pytest.mark.dist
@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_two_processes_equal_one(launcher, tiny_model, tiny_corpus, tmp_path) -> None:
    exe = Path(sys.executable).parent / LAUNCHERS[launcher][0]
    if not exe.exists():
        pytest.skip(f"{exe.name} is not installed beside this Python")
    one = ropectl([sys.executable], tiny_model, tiny_corpus, tmp_path / "one", tmp_path / "c1")
    two = ropectl([str(exe), *LAUNCHERS[launcher][1:]], tiny_model, tiny_corpus, tmp_path / "two", tmp_path / "c2")
    key = ("method", "length", "doc", "tokens")
    assert [tuple(r[k] for k in key) for r in two["results"]] == [tuple(r[k] for k in key) for r in one["results"]]
    for a, b in zip(one["results"], two["results"], strict=True):
        assert b["nll_sum"] == pytest.approx(a["nll_sum"], rel=1e-6)
    assert two["meta"]["world_size"] == 2 and one["meta"]["world_size"] == 1
    # Both ranks appended their cells to the shared log as they finished.
    assert len((tmp_path / "two" / "results.jsonl").read_text().splitlines()) == len(one["results"])
