"""llama-cpp-python at its C level for the llama.cpp engine: one ``llama_model`` (loaded once, mmapped), one
``llama_context`` per method (the RoPE lives in the context's parameters), and ``llama_decode`` over batches of at
most ``N_BATCH`` tokens whose logits are read per batch. The logits buffer llama.cpp fills holds only the positions a
batch asks for, so scoring L tokens never holds more than ``N_BATCH x vocab`` floats (``Llama(logits_all=True)``
keeps ``L x vocab``: 6.4 GB at 32k for SmolLM2's 49k vocabulary).

llama.cpp's log goes through a callback: nothing reaches stdout (which carries --json), errors go to stderr, and the
context's own report of its RoPE (``freq_base``, ``freq_scale``) is kept for the engine's check.
"""

from __future__ import annotations

import ctypes
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

N_BATCH = 512  # tokens per llama_decode: the tier's batch, and llama.cpp's default ubatch
_LOG: list[str] = []
_CALLBACK: Any = None  # the ctypes callback must outlive every call into llama.cpp
LOG_ERROR = 4  # ggml_log_level: NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4 (llama-cpp-python's _logger.py lists an older order)


def quiet_logs(lib: Any) -> None:
    """Route llama.cpp's log into ``_LOG`` (errors also to stderr); once per process."""
    global _CALLBACK
    if _CALLBACK is not None:
        return

    def on_log(level: int, text: bytes, _user: Any) -> None:
        line = text.decode("utf-8", errors="replace") if text else ""
        if line.startswith("llama_context:"):  # the context's report; the rest (debug: thousands of lines) goes
            _LOG.append(line)
            del _LOG[:-100]  # a bounded tail: only the latest context's report is read
        if level == LOG_ERROR:
            sys.stderr.write(line)

    _CALLBACK = lib.llama_log_callback(on_log)
    lib.llama_log_set(_CALLBACK, ctypes.c_void_p(0))


def has_amx() -> bool:
    from ropectl.runtime.cpu import cpu_flags, read_cpuinfo

    text = read_cpuinfo()
    flags = cpu_flags(text) if text else None
    return bool(flags and "amx_tile" in flags)


def load_model(lib: Any, path: str, kv_overrides: Mapping[str, Any], extra_buffers: bool) -> Any:
    """The llama_model of ``path`` with ``kv_overrides`` (the --override-kv of the printed line)."""
    from llama_cpp import _internals

    params = lib.llama_model_default_params()
    # ggml's AMX repacking (the extra buffer type it picks on CPUs with AMX) segfaults in ggml_backend_amx_mul_mat
    # on the tier's machines (tests/compat/llama_cpp_runner.py); the plain CPU buffers compute the same model
    params.use_extra_bufts = extra_buffers
    keep = _overrides_array(lib, kv_overrides) if kv_overrides else None
    if keep is not None:
        params.kv_overrides = keep
    model = _internals.LlamaModel(path_model=path, params=params, verbose=True)  # the log callback keeps it quiet
    model._ropectl_overrides = keep  # llama.cpp reads the array during the load only; kept alive with the model
    return model


def _overrides_array(lib: Any, overrides: Mapping[str, Any]) -> Any:
    array = (lib.llama_model_kv_override * (len(overrides) + 1))()
    for entry, (key, value) in zip(array, overrides.items()):
        entry.key = key.encode("utf-8")
        if isinstance(value, bool):
            entry.tag, entry.value.val_bool = lib.LLAMA_KV_OVERRIDE_TYPE_BOOL, value
        elif isinstance(value, int):
            entry.tag, entry.value.val_i64 = lib.LLAMA_KV_OVERRIDE_TYPE_INT, value
        elif isinstance(value, float):
            entry.tag, entry.value.val_f64 = lib.LLAMA_KV_OVERRIDE_TYPE_FLOAT, value
        else:
            raise ValueError(f"--override-kv {key}: a string override is not supported by this engine")
    array[-1].key = b"\0"
    return array


@dataclass
class Context:
    """A llama_context with the method's RoPE, its batch, and what llama.cpp reported when it was created."""

    ctx: Any
    batch: Any
    n_ctx: int
    n_vocab: int
    report: dict[str, float]

    def close(self) -> None:
        self.batch.close()
        self.ctx.close()


def new_context(lib: Any, model: Any, fields: Mapping[str, Any], n_ctx: int, threads: int) -> Context:
    """A context on the loaded ``model`` whose parameters are llama.cpp's defaults plus ``fields`` (the flags)."""
    from llama_cpp import _internals

    params = lib.llama_context_default_params()
    for name, value in fields.items():
        if name == "rope_scaling_type":
            value = getattr(lib, f"LLAMA_ROPE_SCALING_TYPE_{str(value).upper()}")
        setattr(params, name, value)
    params.n_ctx = n_ctx
    params.n_batch = params.n_ubatch = N_BATCH
    params.n_seq_max = 1
    params.n_threads = params.n_threads_batch = threads
    del _LOG[:]
    ctx = _internals.LlamaContext(model=model, params=params, verbose=True)
    report = {key: float(value) for key, value in re.findall(r"llama_context:\s+(\w+)\s*=\s*([0-9.eE+-]+)", "".join(_LOG))}
    batch = _internals.LlamaBatch(n_tokens=N_BATCH, embd=0, n_seq_max=1, verbose=True)
    return Context(ctx, batch, int(lib.llama_n_ctx(ctx.ctx)), int(model.n_vocab()), report)


def clear(lib: Any, context: Context, from_pos: int = 0) -> None:
    """Forget the KV cells from ``from_pos`` on (0: the whole sequence)."""
    if from_pos == 0:
        lib.llama_memory_clear(context.ctx.memory, True)
    else:
        lib.llama_memory_seq_rm(context.ctx.memory, 0, from_pos, -1)


def decode(context: Context, tokens: Sequence[int], pos0: int, outputs: range) -> Iterator[tuple[int, Any]]:
    """``llama_decode`` of ``tokens`` at positions ``pos0``...; yields (index of the first output, logits) per batch
    that asks for any, logits an fp32 ``[outputs, vocab]`` torch view of llama.cpp's buffer (valid until the next
    batch): the outputs are the token indices in ``outputs``."""
    import numpy as np
    import torch

    batch = context.batch.batch
    for start in range(0, len(tokens), N_BATCH):
        chunk = tokens[start:start + N_BATCH]
        wanted = [start + i in outputs for i in range(len(chunk))]
        for i, token in enumerate(chunk):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = int(token), pos0 + start + i, 1, wanted[i]
            batch.seq_id[i][0] = 0
        batch.n_tokens = len(chunk)
        context.ctx.decode(context.batch)
        if any(wanted):
            view = np.ctypeslib.as_array(context.ctx.get_logits(), shape=(sum(wanted), context.n_vocab))
            yield start + wanted.index(True), torch.from_numpy(view)
