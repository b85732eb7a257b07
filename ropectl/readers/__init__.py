"""Engines in one place: how each engine and version reads a RoPE config, what it cannot run, and its command.

Each engine module (``transformers``, ``vllm``, ``sglang``, ``llama_cpp``, ``lm_eval``) exposes ``READERS``, a tuple
of frozen ``Reader`` entries, and ``predict(reader, config, version=None) -> Reading``; ``emit`` prints the vLLM and
llama.cpp commands from them (``sglang.emit`` its own). ``patch``'s warnings, ``inspect --engines`` and
docs/reference/compatibility.md's reader table are all derived from these. Adding an engine is one module and its name in
``BUILTIN`` (docs/contributing/add-an-engine.md).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from ropectl.readers.base import Quirk, Reader, Reading, VersionRange

# Engine modules, in the order the views list them. Each has READERS and predict().
BUILTIN = ("ropectl.readers.transformers", "ropectl.readers.vllm", "ropectl.readers.sglang",
                  "ropectl.readers.llama_cpp", "ropectl.readers.lm_eval")

Predict = Callable[[Reader, Mapping[str, Any], "str | None"], Reading]


def serving_readers() -> dict[str, Any]:
    """The reader modules a checkpoint is served with, by the name users pass (recommend --serve-with): each that
    names ``SERVE_AS`` and offers ``cannot_serve(rope_type)``, in BUILTIN's order."""
    modules = (importlib.import_module(name) for name in BUILTIN)
    return {m.SERVE_AS: m for m in modules if getattr(m, "SERVE_AS", None)}


def serving_engines() -> tuple[str, ...]:
    return tuple(serving_readers())


def emitters() -> tuple[str, ...]:
    """The engines ``patch --emit`` prints a serving line for: the serving readers with ``emit_line``."""
    return tuple(name for name, m in serving_readers().items() if hasattr(m, "emit_line"))


def serving_engines_for(model: str) -> tuple[str, ...]:
    """The engines a checkpoint's format reaches by default: a GGUF file is llama.cpp's; a Hugging Face folder the
    others that serve by default."""
    readers = serving_readers()
    if str(model).lower().endswith(".gguf"):
        return tuple(name for name, m in readers.items() if getattr(m, "SERVES_GGUF", False))
    return tuple(name for name, m in readers.items() if m.SERVED_BY_DEFAULT)


def why_not_served(rope_type: str, serve_with: Iterable[str]) -> str | None:
    """Why one of ``serve_with`` would not compute what transformers evaluated for ``rope_type`` (None: all do)."""
    readers = serving_readers()
    return next((why for engine in serve_with if engine in readers
                 and (why := readers[engine].cannot_serve(rope_type))), None)


def engines() -> Iterator[tuple[Reader, Predict]]:
    """Every known reader with the function that predicts its reading."""
    for name in BUILTIN:
        module = importlib.import_module(name)
        for reader in module.READERS:
            yield reader, module.predict


__all__ = ["BUILTIN", "Quirk", "Reader", "Reading", "VersionRange", "engines",
           "emitters", "serving_engines", "serving_engines_for", "serving_readers", "why_not_served"]
