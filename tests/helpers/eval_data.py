"""Shared helpers for the eval tests: tiny checkpoints with a character tokenizer, and small corpora.

The fixtures built on them (tiny_model, tiny_corpus, isolated) are in tests/conftest.py.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from tests.helpers.checkpoints import VOCAB, tiny_gemma3, tiny_llama, tiny_qwen2

ALPHABET = "abcdefghijklmnopqrstuvwxyz ,.;:!?'\n-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def add_char_tokenizer(folder: Path, bos: bool = True) -> Path:
    """A character-level fast tokenizer (ids < VOCAB) that adds BOS like Llama's does."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for ch in ALPHABET:
        vocab.setdefault(ch, len(vocab))
    assert len(vocab) <= VOCAB
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    if bos:
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(folder)
    return folder


def words(seed: int, n_chars: int) -> str:
    rng = random.Random(seed)
    pool = ["the", "king", "queen", "of", "and", "to", "my", "lord", "what", "is", "thou", "art", "love", "\n"]
    out: list[str] = []
    size = 0
    while size < n_chars:
        w = rng.choice(pool)
        out.append(w)
        size += len(w) + 1
    return " ".join(out)[:n_chars]


def write_corpus(folder: Path, sizes: list[int], kind: str = "txt") -> Path:
    """Documents of ``sizes`` characters (= tokens - 1 with the char tokenizer and BOS)."""
    folder.mkdir(parents=True, exist_ok=True)
    if kind == "jsonl":
        path = folder / "docs.jsonl"
        path.write_text("".join(json.dumps({"text": words(i, n)}) + "\n" for i, n in enumerate(sizes)))
        return path
    for i, n in enumerate(sizes):
        (folder / f"doc{i:02d}.txt").write_text(words(i, n))
    return folder


def build(kind: str, folder: Path, **overrides: Any) -> Path:
    maker = {"llama": tiny_llama, "qwen2": tiny_qwen2, "gemma3": tiny_gemma3}[kind]
    maker(folder, **overrides)
    return add_char_tokenizer(folder)
