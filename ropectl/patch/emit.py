"""Serving-engine flags for a patched RoPE: vLLM's ``--hf-overrides`` and llama.cpp's ``--rope-*``.

Both print only. vLLM derives its default max length from the config (x factor for linear/dynamic,
original x factor for yarn, unchanged for default/llama3/longrope), so ``max_position_embeddings`` is
overridden only where that rule would not reach the target, and never where it would count the factor twice.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Any

from ropectl.errors import MethodError
from ropectl.gguf_meta import GGUF_ARCHS
from ropectl.patch.gguf import llama_cpp_attn_factor
from ropectl.rope.params import RopeParams
from ropectl.schema.write import v5_parameters

VLLM_RAISES_MAX_POS = ("default", "llama3", "longrope")


def vllm_overrides(rope: RopeParams, layers: Mapping[str, RopeParams], partial: float, target: int) -> dict[str, Any]:
    part = partial if partial != 1.0 else None
    if layers:
        params: dict[str, Any] = {label: v5_parameters(p, part) for label, p in sorted(layers.items())}
    else:
        params = v5_parameters(rope, part)
    overrides: dict[str, Any] = {"rope_parameters": params}
    if rope.rope_type in VLLM_RAISES_MAX_POS:
        overrides["max_position_embeddings"] = target
    return overrides


def emit_vllm(model: str, rope: RopeParams, layers: Mapping[str, RopeParams], partial: float,
              target: int) -> tuple[dict[str, Any], list[str]]:
    overrides = vllm_overrides(rope, layers, partial, target)
    args = ["--hf-overrides", json.dumps(overrides, separators=(",", ":")), "--max-model-len", str(target)]
    warnings = []
    if rope.rope_type == "dynamic":
        warnings.append("vLLM applies 'dynamic' as a static scaling for every length (vLLM #3488), unlike transformers")
    if rope.rope_type == "yarn" and any(k in rope.scaling for k in ("attention_factor", "mscale", "mscale_all_dim")):
        warnings.append("vLLM's plain YaRN path may ignore attention_factor/mscale (vLLM PR #46280): check its logs")
    command = "vllm serve " + " ".join(shlex.quote(a) for a in [model, *args])
    return {"engine": "vllm", "hf_overrides": overrides, "max_model_len": target, "args": args,
            "command": command}, warnings


def _arch_for(model_type: str) -> str | None:
    return next((arch for arch, (mt, _) in GGUF_ARCHS.items() if mt == model_type), None)


def _fmt(value: float) -> str:
    return f"{value:.10g}"


def llama_cpp_args(rope: RopeParams, target: int, model_type: str) -> tuple[list[str], list[str]]:
    kind = rope.rope_type
    if kind in ("dynamic", "llama3", "longrope"):
        why = {"dynamic": "llama.cpp has no dynamic NTK scaling",
               "llama3": "llama.cpp bakes llama3 frequencies into a rope_freqs tensor when converting",
               "longrope": "llama.cpp reads LongRoPE factors from tensors written when converting"}[kind]
        raise MethodError(f"method '{kind}' cannot be expressed as llama.cpp flags: {why}",
                          "use linear, ntk (--rope-freq-base) or yarn, or convert the patched checkpoint to GGUF")
    args = ["--rope-scaling", "none" if kind == "default" else kind]
    if kind in ("linear", "yarn"):
        args += ["--rope-scale", _fmt(rope.factor or 1.0)]
    args += ["--rope-freq-base", _fmt(rope.rope_theta)]
    warnings: list[str] = []
    if kind == "yarn":
        sc = rope.scaling
        attn = llama_cpp_attn_factor(rope)
        args += ["--yarn-orig-ctx", str(rope.original_max_position_embeddings),
                 "--yarn-beta-fast", _fmt(sc.get("beta_fast") or 32.0),
                 "--yarn-beta-slow", _fmt(sc.get("beta_slow") or 1.0),
                 "--yarn-attn-factor", _fmt(attn)]
        arch = _arch_for(model_type)
        if abs(attn - 1.0) > 1e-7 and arch:
            # Recent llama.cpp recomputes the YaRN factor itself and multiplies in this GGUF key instead.
            args += ["--override-kv", f"{arch}.rope.scaling.attn_factor=float:{_fmt(attn)}"]
        if sc.get("truncate") is False:
            warnings.append("llama.cpp always rounds the YaRN ramp ends; truncate=false is not expressible there")
    args += ["-c", str(target)]
    return args, warnings


def emit_llama_cpp(model: str, rope: RopeParams, layers: Mapping[str, RopeParams], model_type: str,
                   target: int) -> tuple[dict[str, Any], list[str]]:
    args, warnings = llama_cpp_args(rope, target, model_type)
    if layers:
        warnings.append("these flags set the full-attention RoPE; sliding-window layers keep the GGUF's own base")
    if not model.lower().endswith(".gguf"):
        # llama.cpp loads only GGUF: printing the HF folder after -m would give a command that cannot start.
        warnings.append(f"llama.cpp loads GGUF files, not the Hugging Face checkpoint '{model}': convert it with "
                        "llama.cpp's convert_hf_to_gguf.py and put that file in place of MODEL.gguf")
        model = "MODEL.gguf"
    command = "llama-server -m " + " ".join(shlex.quote(a) for a in [model, *args])
    return {"engine": "llama.cpp", "args": args, "command": command}, warnings
