"""The suite's own thread count reaches torch and the processes tests start (tests/conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import THREADS


def test_torch_in_the_suite_uses_the_set_threads() -> None:
    """Whatever OMP_NUM_THREADS the suite inherited (OMP_NUM_THREADS=7 pytest ... passes too), torch uses THREADS,
    which is never more than the cores this process may use unless ROPECTL_TEST_THREADS asks for it."""
    import torch

    assert torch.get_num_threads() == int(THREADS)
    assert int(THREADS) <= len(os.sched_getaffinity(0)) or "ROPECTL_TEST_THREADS" in os.environ


def test_a_subprocess_inherits_them() -> None:
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"], capture_output=True,
                         text=True, check=True).stdout
    assert int(out) == int(THREADS)
