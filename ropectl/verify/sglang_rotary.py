"""Run by the SGLang venv's Python (it never imports ropectl): what SGLang's own code makes of a launch line. verify's
SGLang row (``rotary``, through ``--engine-python sglang=PATH``) and the SGLang tier (tests/compat/test_sglang.py)
both run this file by its path.

Usage: python sglang_rotary.py JOBS.json OUT.json. Each job is {"name", "command", "positions"}: ``command`` is a
``python -m sglang.launch_server ...`` line. SGLang's server-argument parser (``prepare_server_args``) reads its
arguments, ``ModelConfig.from_server_args`` loads the model's config.json with the overrides and derives the context
length (raising above the derived one), and ``get_rope`` builds the rotary embedding from what ModelConfig holds, as
the model files call it (``get_rope_config``: rope_theta and the whole rope_parameters). The result: the context
length, the rope section, the rotary class, and cos/sin (times its scale) at ``positions``.

The sglang wheel is installed without its dependencies (they pin CUDA builds); its kernel packages are absent, and
triton (a 1 GB wheel imported by SGLang's kernel modules at import time only) and torchvision (imported by its
multimodal config modules) are import-only stand-ins. SGLANG_USE_CPU_ENGINE=1 selects SGLang's CPU platform. Nothing
here runs a kernel: the rotary tables are plain torch.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import shlex
import sys
import types

STAND_IN = ("triton", "torchvision")


class _Any:
    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, item: str) -> _Any:
        return _Any(f"{self._name}.{item}")

    def __call__(self, *args: object, **kwargs: object) -> object:
        if len(args) == 1 and callable(args[0]) and not kwargs:  # used as a decorator: @triton.jit
            return args[0]
        return _Any(f"{self._name}()")

    def __getitem__(self, item: object) -> _Any:
        return self

    def __mro_entries__(self, bases: tuple) -> tuple:
        return (object,)


class _StandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):  # noqa: ANN001, ANN201
        if name.split(".")[0] in STAND_IN:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):  # noqa: ANN001, ANN201
        module = types.ModuleType(spec.name)
        module.__path__, module.__version__ = [], "3.0.0"
        module.__getattr__ = lambda item: _Any(f"{spec.name}.{item}") if not item.startswith("__") else None
        return module

    def exec_module(self, module) -> None:  # noqa: ANN001
        pass


def _rows(cos, sin) -> dict:  # noqa: ANN001
    return {"cos": [[float(v) for v in row] for row in cos], "sin": [[float(v) for v in row] for row in sin]}


def _cos_sin(rotary, positions: list[int]) -> dict:  # noqa: ANN001
    """The rows its forward reads. LongRoPE holds a short table then a long one, and offsets every position into the
    long one when any position in the batch exceeds the original length (its forward)."""
    if hasattr(rotary, "long_short_cos_sin_cache"):
        k = rotary.original_max_position_embeddings
        offset = k if max(positions) > k else 0
        cache = rotary.long_short_cos_sin_cache.float()
    else:
        offset = 0
        if hasattr(rotary, "_ensure_cos_sin_cache_length"):
            rotary._ensure_cos_sin_cache_length(max(positions) + 1)
        cache = rotary.cos_sin_cache.float()
    half = cache.shape[-1] // 2
    rows = [p + offset for p in positions]
    return _rows(cache[rows, :half].tolist(), cache[rows, half:].tolist())


def run(job: dict) -> dict:
    import torch
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.layers.rotary_embedding import get_rope
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.utils.hf_transformers.common import get_rope_config

    argv = shlex.split(job["command"])
    assert argv[:3] == ["python", "-m", "sglang.launch_server"], argv[:3]
    try:
        server_args = prepare_server_args(argv[3:])
        mc = ModelConfig.from_server_args(server_args)
    except Exception as exc:  # noqa: BLE001 - what SGLang raises is the result
        return {"error": f"{type(exc).__name__}: {exc}"[:1500]}
    text = mc.hf_text_config
    theta, params = get_rope_config(text)
    params = dict(params or {})
    out = {"context_length": int(mc.context_len), "rope_theta": float(theta),
           "rope_parameters": json.loads(json.dumps(params, default=str)),
           "max_position_embeddings": int(text.max_position_embeddings)}
    head = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    partial = float(params.get("partial_rotary_factor") or getattr(text, "partial_rotary_factor", 1.0) or 1.0)
    try:
        rotary = get_rope(head, head, text.max_position_embeddings, theta, True, params, torch.float32, partial)
    except Exception as exc:  # noqa: BLE001
        out["rope_error"] = f"{type(exc).__name__}: {exc}"[:1500]
        return out
    out["kind"] = type(rotary).__name__
    out.update(_cos_sin(rotary, job["positions"]))
    return out


STAND_IN_FINDER = _StandIn()


def prepare_imports() -> None:
    """torch's compiler probes for triton and torchvision itself: it imports first, and finds neither (the stand-ins
    go on sys.meta_path after this; tests/compat/rope_probe.py does the same)."""
    import functorch.compile  # noqa: F401
    import torch._dynamo  # noqa: F401
    import torch._inductor.runtime.triton_compat  # noqa: F401
    import torch.utils.flop_counter  # noqa: F401


def main() -> None:
    os.environ["SGLANG_USE_CPU_ENGINE"] = "1"  # SGLang's CPU platform: rotary tables in torch, no CUDA kernels
    prepare_imports()
    sys.meta_path.insert(0, STAND_IN_FINDER)
    jobs = json.loads(open(sys.argv[1]).read())
    results = {}
    for job in jobs:
        results[job["name"]] = run(job)
        with open(sys.argv[2], "w") as fh:  # after each job: a crash keeps the earlier results
            json.dump(results, fh)


if __name__ == "__main__":
    main()
