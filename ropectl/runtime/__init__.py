"""What every command shares: under ``eval``, ``finetune`` and ``search``, above the RoPE math, schemas and readers.

- the model as loaded: its source, config, tokenizer, the methods as evaluated, device and dtype (``model``), the
  weights once per process (``load``), sharing loads between runs inside one process (``reuse``), the dtype this
  CPU runs fastest (``cpu``), ropectl's cache folder (``cache``), the embedded defaults (``packages``);
- a loaded transformers model's forward (``forward``: the decoder body, hidden -> logits) and its rotary modules
  with the one frequency check (``rotary``);
- the corpus (``corpus``), the length parser of every length flag (``lengths``);
- the run: data parallelism and the launcher (``dist``), the results folder and its one-writer lock (``folder``,
  ``lock``), the append-only row log (``rowlog``), Ctrl-C / SIGTERM and the one resume line (``interrupt``).

The names below are the surface other packages use (finetune imports nothing else of the runtime's); they load
lazily, so ``import ropectl.runtime.lengths`` costs only that module. Nothing here imports the CLI, typer or rich.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the same names, for type checkers and the import graph of tests/cli/test_layers.py
    from ropectl.runtime.corpus import load_corpus, make_source
    from ropectl.runtime.cpu import linear_flops
    from ropectl.runtime.dist import launcher, leave_group, world_from_env
    from ropectl.runtime.forward import decoder, logits_fn
    from ropectl.runtime.interrupt import Interrupted, resume_line, sigterm_as_interrupt
    from ropectl.runtime.lengths import length_label, parse_length, parse_lengths
    from ropectl.runtime.load import from_pretrained_sdpa, no_gguf_bar
    from ropectl.runtime.model import (
        MethodState,
        ModelSource,
        load_tokenizer,
        model_source,
        quiet_transformers,
        resolve_device,
        resolve_dtype_choice,
        trained_context,
    )
    from ropectl.runtime.reuse import reusing
    from ropectl.runtime.rotary import rotary_modules, verify_rotary
    from ropectl.runtime.rowlog import append_jsonl, read_jsonl

# name -> the module of this package that defines it
SURFACE: dict[str, str] = {
    "load_corpus": "corpus", "make_source": "corpus",
    "linear_flops": "cpu",
    "launcher": "dist", "leave_group": "dist", "world_from_env": "dist",
    "decoder": "forward", "logits_fn": "forward",
    "Interrupted": "interrupt", "resume_line": "interrupt", "sigterm_as_interrupt": "interrupt",
    "length_label": "lengths", "parse_length": "lengths", "parse_lengths": "lengths",
    "from_pretrained_sdpa": "load", "no_gguf_bar": "load",
    "MethodState": "model", "ModelSource": "model", "load_tokenizer": "model", "model_source": "model",
    "quiet_transformers": "model", "resolve_device": "model", "resolve_dtype_choice": "model",
    "trained_context": "model",
    "reusing": "reuse",
    "rotary_modules": "rotary", "verify_rotary": "rotary",
    "append_jsonl": "rowlog", "read_jsonl": "rowlog",
}
__all__ = ["Interrupted", "MethodState", "ModelSource", "append_jsonl", "decoder", "from_pretrained_sdpa",
    "launcher", "leave_group", "length_label", "linear_flops", "load_corpus", "load_tokenizer", "logits_fn",
    "make_source", "model_source", "no_gguf_bar", "parse_length", "parse_lengths", "quiet_transformers",
    "read_jsonl", "resolve_device", "resolve_dtype_choice", "resume_line", "reusing", "rotary_modules",
    "sigterm_as_interrupt", "trained_context", "verify_rotary", "world_from_env"]


def __getattr__(name: str) -> Any:
    """A surface name from its module, imported on first use (PEP 562)."""
    if name not in SURFACE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{SURFACE[name]}"), name)
