"""parse_once: one gguf.GGUFReader per unchanged file inside the block, none kept after it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ropectl.io.gguf_once import parse_once
from tests.helpers.checkpoints import tiny_gguf


def test_one_reader_per_file_inside_and_a_fresh_one_outside(tmp_path: Path) -> None:
    import gguf

    a, b = tiny_gguf(tmp_path / "a.gguf"), tiny_gguf(tmp_path / "b.gguf", context=512)
    original = gguf.GGUFReader
    with parse_once():
        first = gguf.GGUFReader(str(a))
        assert gguf.GGUFReader(a) is first  # a Path or a str: the same file
        assert gguf.GGUFReader(str(b)) is not first
        with parse_once():  # nested: still the outer block's readers
            assert gguf.GGUFReader(str(a)) is first
    assert gguf.GGUFReader is original
    assert gguf.GGUFReader(str(a)) is not first  # control: outside the block every call parses


def test_a_rewritten_file_is_read_again(tmp_path: Path) -> None:
    import gguf

    path = tiny_gguf(tmp_path / "m.gguf")
    with parse_once():
        before = gguf.GGUFReader(str(path))
        tiny_gguf(path, context=1024)
        os.utime(path, ns=(1, 1))  # a different mtime even where the clock is coarse
        after = gguf.GGUFReader(str(path))
    assert after is not before
    assert int(after.fields["llama.context_length"].parts[-1][0]) == 1024


def test_the_original_comes_back_after_an_error(tmp_path: Path) -> None:
    import gguf

    original = gguf.GGUFReader
    with pytest.raises(RuntimeError), parse_once():
        raise RuntimeError("boom")
    assert gguf.GGUFReader is original


@pytest.mark.slow
def test_a_sweep_load_parses_the_real_gguf_once(smollm2: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweep's set-up builds SmolLM2's config from its GGUF twice (the model source, then the model class), each
    through transformers' own reader; inside the block: one parse. (The tokenizer and weights loaders call the
    reader the same way, through load_gguf_checkpoint; building them here would cost a minute.)"""
    import gguf

    from ropectl.runtime.load import auto_class
    from ropectl.runtime.model import model_source

    built: list[str] = []
    original = gguf.GGUFReader

    def counting(path, mode="r"):
        built.append(str(path))
        return original(path, mode)

    monkeypatch.setattr(gguf, "GGUFReader", counting)
    model_source(str(smollm2))
    assert len(built) == 1  # control: the counter sees transformers' parse
    built.clear()
    with parse_once():
        source = model_source(str(smollm2))
        auto_class(source.path, source.kwargs)
    assert built == [str(smollm2)] and source.config["vocab_size"] == 49152
