"""A tiny Llama trained at 64 tokens (char tokenizer) and a small corpus: every finetune test runs in seconds."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.eval_data import build, write_corpus

TRAINED = 64
DOC_CHARS = [900, 800, 700, 650, 600, 500, 400, 300]


@pytest.fixture(scope="session")
def ft_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build("llama", tmp_path_factory.mktemp("ft-llama") / "model", max_position_embeddings=TRAINED)


@pytest.fixture(scope="session")
def ft_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("ft-corpus"), DOC_CHARS)
