"""bench/bench_ppl.py reads --lengths exactly as eval-ppl does (the bench is a script, loaded from its file)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from ropectl.runtime.lengths import parse_lengths

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_ppl.py"


def bench_module():
    spec = importlib.util.spec_from_file_location("bench_ppl", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_lengths_accept_k_suffixes_like_eval_ppl() -> None:
    bench = bench_module()
    assert bench.lengths_arg("8k") == (8192,)
    assert bench.lengths_arg("16384,2k,8k,8192") == (2048, 8192, 16384)  # sorted, deduplicated
    assert bench.lengths_arg("1.5k,4096") == parse_lengths("1.5k,4096") == (1536, 4096)


def test_bad_length_is_one_line_naming_the_fix() -> None:
    with pytest.raises(SystemExit) as caught:
        bench_module().lengths_arg("8q")
    message = str(caught.value)
    assert "'8q'" in message and "Fix:" in message and "\n" not in message
