"""Run inside a compat venv (one transformers version): what RoPE each model really uses.

It must not import ropectl (the venvs do not have it). Usage:

    python runner.py JOBS.json   # [{"folder": ..., "lengths": [8, 256]}, ...]

For each folder it loads the config the way ``from_pretrained`` does, builds the model with random
weights, runs a real forward at each length, hooks every rotary embedding module and decodes the cos/sin
it returned into inverse frequencies (the angle at position 1) and the attention factor (cos at position
0). It prints one JSON object {folder: {"lengths": {L: {role: {...}}}} or {"error": ...}}.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import warnings
from typing import Any


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _role(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    layer_type = kwargs.get("layer_type") or (args[2] if len(args) > 2 and isinstance(args[2], str) else None)
    if layer_type:
        return str(layer_type)
    if name.endswith("rotary_emb_local"):
        return "sliding_attention"
    return "main"


def _decode(cos: Any, sin: Any) -> dict[str, Any]:
    cos, sin = cos.double(), sin.double()
    while cos.dim() > 2:
        cos, sin = cos[0], sin[0]
    half = cos.shape[-1] // 2
    # Most rotary classes return each frequency twice (cat(freqs, freqs)); gpt-oss returns each once.
    if not bool((cos[:, :half] - cos[:, half:2 * half]).abs().max() < 1e-12):
        half = cos.shape[-1]
    attention = float(cos[0, 0])
    inv = [math.atan2(float(sin[1, j]), float(cos[1, j])) for j in range(half)]
    # How well (inv, attention) describe the whole table: large when frequencies vary with position.
    pos = __import__("torch").arange(cos.shape[0], dtype=cos.dtype)[:, None]
    rebuilt = attention * (pos * __import__("torch").tensor(inv, dtype=cos.dtype)[None, :]).cos()
    table_err = float((rebuilt - cos[:, :half]).abs().max())
    return {"inv_freq": inv, "attention": attention, "rows": int(cos.shape[0]), "table_err": table_err}


def _hooks(model: Any, seen: dict[str, Any]) -> list[Any]:
    handles = []
    for name, module in model.named_modules():
        if not type(module).__name__.endswith("RotaryEmbedding"):
            continue

        def hook(mod: Any, args: Any, kwargs: Any, out: Any, name: str = name) -> None:
            role = _role(name, args, kwargs)
            if role not in seen and isinstance(out, tuple) and len(out) == 2:
                seen[role] = _decode(out[0], out[1])

        handles.append(module.register_forward_hook(hook, with_kwargs=True))
    return handles


def run_one(folder: str, lengths: list[int]) -> dict[str, Any]:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(folder)
    torch.manual_seed(0)
    try:
        model = AutoModelForCausalLM.from_config(config, attn_implementation="eager", torch_dtype=torch.float32)
    except TypeError:  # very old signatures
        model = AutoModelForCausalLM.from_config(config)
    model = model.float().eval()
    vocab = int(getattr(config.get_text_config() if hasattr(config, "get_text_config") else config, "vocab_size", 64))
    out: dict[str, Any] = {}
    for length in lengths:
        seen: dict[str, Any] = {}
        handles = _hooks(model, seen)
        try:
            ids = (torch.arange(length) % vocab).unsqueeze(0)
            with torch.no_grad():
                model(input_ids=ids, use_cache=False)
        finally:
            for h in handles:
                h.remove()
        out[str(length)] = seen
    return {"lengths": out}


def main(path: str) -> None:
    import transformers

    collect = _Collect()
    logging.getLogger("transformers").addHandler(collect)
    transformers.logging.set_verbosity_warning()
    results: dict[str, Any] = {"__version__": transformers.__version__}
    for job in json.load(open(path, encoding="utf-8")):
        collect.messages.clear()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                result = run_one(job["folder"], job["lengths"])
            except Exception as exc:  # the point is to report what each version raises
                result = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        result["warnings"] = sorted(set(collect.messages + [str(w.message) for w in caught]))[:20]
        results[job["folder"]] = result
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
