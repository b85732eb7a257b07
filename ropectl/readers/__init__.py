"""Engines in one place: how each engine and version reads a RoPE config, what it cannot run, and its command.

Each engine module (``transformers``, ``vllm``, ``sglang``, ``llama_cpp``, ``lm_eval``) exposes ``READERS``, a tuple
of frozen ``Reader`` entries, and ``predict(reader, config, version=None) -> Reading``; ``emit`` prints the vLLM and
llama.cpp commands from them (``sglang.emit`` its own). ``patch``'s warnings, ``inspect --engines`` and
docs/reference/compatibility.md's reader table are all derived from these. Adding an engine is one module and its name in
``ENGINE_MODULES`` (docs/contributing/add-an-engine.md).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from ropectl.readers.base import Quirk, Reader, Reading, VersionRange

# Engine modules, in the order the views list them. Each has READERS and predict().
ENGINE_MODULES = ("ropectl.readers.transformers", "ropectl.readers.vllm", "ropectl.readers.sglang",
                  "ropectl.readers.llama_cpp", "ropectl.readers.lm_eval")

Predict = Callable[[Reader, Mapping[str, Any], "str | None"], Reading]


# Engines a checkpoint is served with, by the name users pass (recommend --serve-with).
SERVING_ENGINES = ("transformers", "vllm", "sglang", "llama.cpp")
# The default when --serve-with is not given (SGLang only when asked: it would leave out what it cannot serve).
DEFAULT_SERVING = ("transformers", "vllm", "llama.cpp")


def serving_engines_for(model: str) -> tuple[str, ...]:
    """The engines a checkpoint's format reaches by default: a GGUF file is llama.cpp's; a Hugging Face folder the
    others."""
    return ("llama.cpp",) if str(model).lower().endswith(".gguf") else DEFAULT_SERVING


def why_not_served(rope_type: str, serve_with: Iterable[str]) -> str | None:
    """Why one of ``serve_with`` would not compute what transformers evaluated for ``rope_type`` (None: all do)."""
    from ropectl.readers import llama_cpp, sglang, vllm

    checks = {"vllm": vllm.cannot_serve, "sglang": sglang.cannot_serve, "llama.cpp": llama_cpp.cannot_express}
    return next((why for engine in serve_with if engine in checks and (why := checks[engine](rope_type))), None)


def engines() -> Iterator[tuple[Reader, Predict]]:
    """Every known reader with the function that predicts its reading."""
    for name in ENGINE_MODULES:
        module = importlib.import_module(name)
        for reader in module.READERS:
            yield reader, module.predict


__all__ = ["ENGINE_MODULES", "SERVING_ENGINES", "Quirk", "Reader", "Reading", "VersionRange", "engines",
           "serving_engines_for", "why_not_served"]
