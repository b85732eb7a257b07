"""A CPU forward's freed activations are kept for the next forward (runtime/cpu.py keep_freed_memory): over repeated
forwards of a two-layer Llama at 8k tokens (64 MiB MLP activations, past glibc's largest mmap threshold), the
later forwards fault in a small fraction of the pages that the negative control (the same forwards in a process that
did not ask) faults in each time. Counted by the kernel (getrusage's minor faults)."""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest


def _thp_always() -> bool:  # huge pages on every mapping: the control faults 2 MiB at a time, and counts differ
    try:
        return "[always]" in open("/sys/kernel/mm/transparent_hugepage/enabled").read()
    except OSError:
        return False


pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                                 reason="glibc's mallopt"),
              pytest.mark.skipif(_thp_always(), reason="transparent huge pages on every mapping change the counts")]

FORWARDS = r"""
import json, resource, sys
import torch
from ropectl.runtime.cpu import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "keep" else False
from transformers import LlamaConfig, LlamaModel
torch.manual_seed(0)
config = LlamaConfig(hidden_size=256, intermediate_size=2048, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=4, vocab_size=256, max_position_embeddings=8192)
model = LlamaModel(config).eval()
ids = torch.randint(0, 256, (1, 8192))
faults = []
with torch.inference_mode():
    for _ in range(3):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        model(input_ids=ids)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"kept": kept, "faults": faults}))
"""


def forwards(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", FORWARDS, mode], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_freed_activations_are_reused_not_faulted_in_again() -> None:
    kept, control = forwards("keep"), forwards("default")
    assert kept["kept"] is True
    pages = 2 * 8192 * 2048 * 4 // 4096  # the two 64 MiB activations: what a forward faults in from fresh memory
    assert min(control["faults"][1:]) > pages // 2, control  # negative control: every forward faults them in again
    assert sum(kept["faults"][1:]) < sum(control["faults"][1:]) // 4, (kept, control)


def test_the_opt_out_leaves_the_allocator_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROPECTL_KEEP_FREED_MEMORY", "0")
    from ropectl.runtime.cpu import keep_freed_memory

    assert keep_freed_memory() is False

