"""Reader knowledge in one place: how each engine and version reads a RoPE config.

Each engine module (``transformers``; ``vllm`` and ``llama_cpp`` alongside) exposes ``READERS``, a tuple
of frozen ``Reader`` entries, and ``predict(reader, config, version=None) -> Reading``. ``patch``'s
warnings, ``inspect --engines`` and the README's compatibility table are all derived from them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ropectl.readers.base import Quirk, Reader, Reading, VersionRange

# Engine modules, in the order the views list them. Each has READERS and predict().
ENGINE_MODULES = ("ropectl.readers.transformers", "ropectl.readers.vllm", "ropectl.readers.llama_cpp",
                  "ropectl.readers.lm_eval")

Predict = Callable[[Reader, Mapping[str, Any]], Reading]


def engines() -> Iterator[tuple[Reader, Predict]]:
    """Every known reader with the function that predicts its reading."""
    for name in ENGINE_MODULES:
        module = importlib.import_module(name)
        for reader in module.READERS:
            yield reader, module.predict


__all__ = ["ENGINE_MODULES", "Quirk", "Reader", "Reading", "VersionRange", "engines"]
