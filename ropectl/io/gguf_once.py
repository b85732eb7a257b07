"""One parse of a GGUF file's metadata per load.

transformers builds a GGUF model's config, its tokenizer and its weights each through a new ``gguf.GGUFReader``
(``load_gguf_checkpoint``), and a sweep's set-up asks for the config more than once: five parses of the same
file for one eval-ppl run. Each parse turns every tokenizer string into numpy views, about 4 s for SmolLM2's
49k-token vocabulary on one AVX2 core. Inside :func:`parse_once`, ``gguf.GGUFReader(path)`` returns the reader
an earlier call built for the same unchanged file; the readers are dropped on exit, so they never outlive the
load they serve.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def parse_once() -> Iterator[None]:
    """Within the block, every ``gguf.GGUFReader`` of the same file (same size and mtime) is one reader."""
    import gguf

    original = gguf.GGUFReader
    if getattr(original, "parse_once", False):  # nested: the outer block already shares
        yield
        return
    readers: dict[tuple[Any, ...], Any] = {}

    def reader(path: Any, mode: str = "r") -> Any:
        stat = os.stat(path)
        key = (os.path.realpath(path), mode, stat.st_size, stat.st_mtime_ns)
        if key not in readers:
            readers[key] = original(path, mode)
        return readers[key]

    reader.parse_once = True  # type: ignore[attr-defined]
    gguf.GGUFReader = reader
    try:
        yield
    finally:
        gguf.GGUFReader = original
        readers.clear()
