"""Data parallelism: 2 CPU processes under torchrun (gloo) train exactly what 1 process does with the same global batch."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.helpers.launch import PARALLEL_ATOL, free_port, run_finetune


@pytest.mark.slow
@pytest.mark.dist
def test_two_process_ddp_equals_one_process(ft_model: Path, ft_corpus: Path, isolated: Path) -> None:
    from safetensors.torch import load_file

    args = [str(ft_model), "-m", "yarn:4", "--dataset", str(ft_corpus), "--steps", "3", "--batch-tokens", "128",
            "--dtype", "fp32", "--device", "cpu", "--lr", "1e-3", "--json"]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                str(free_port())]
    run_finetune(torchrun, [*args, "-o", str(isolated / "two")], isolated)
    run_finetune([sys.executable], [*args, "-o", str(isolated / "one")], isolated)
    one, two = load_file(str(isolated / "one" / "model.safetensors")), load_file(str(isolated / "two" / "model.safetensors"))
    base = load_file(str(ft_model / "model.safetensors"))
    assert one.keys() == two.keys()
    moved = max(float((one[k] - base[k]).abs().max()) for k in base)
    assert moved > 100 * PARALLEL_ATOL  # negative control: training changed the weights far beyond the tolerance
    for name in one:
        assert float((one[name] - two[name]).abs().max()) <= PARALLEL_ATOL, name
