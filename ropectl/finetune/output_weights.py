"""The torch and peft side of writing a fine-tuned checkpoint (``ropectl.finetune.output``): dtypes, the RoPE the
model trained with, merging, and saving weights, adapters and a dequantized GGUF base."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ropectl.errors import UsageError
from ropectl.finetune.build import dequantized, verify_patched_rope

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32",
          "bfloat16": "bfloat16", "float16": "float16", "float32": "float32"}
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"


def is_peft(model: Any) -> bool:
    try:
        from peft import PeftModel
    except ImportError:  # no peft: the model cannot be a peft model
        return False
    return isinstance(model, PeftModel)


def resolve_dtype(dtype: str, config: Mapping[str, Any]) -> str:
    """The torch dtype name the weights are written in; ``auto`` keeps the source's declared dtype (else float32)."""
    if dtype == "auto":
        declared = config.get("dtype") or config.get("torch_dtype") or "float32"
        return DTYPES.get(str(declared), "float32")
    if dtype not in DTYPES:
        raise UsageError(f"unknown dtype '{dtype}' for the written weights", "use auto, bf16, fp16 or fp32")
    return DTYPES[dtype]


def check_trained_rope(model: Any, config: Mapping[str, Any]) -> None:
    """The model in memory (the one trained) has the RoPE the written (patched) config describes: a fallen-back
    rope_theta or a scaling set after from_pretrained (ignored by transformers 5) would make the checkpoint describe
    another model. Its inv_freq buffers may be bf16 after training: compared at their precision."""
    verify_patched_rope(
        model, config,
        problem="the model being written was trained with other RoPE than its patched config says",
        fix="build the model with from_pretrained(..., config=<the patched config>) before training; nothing was "
            "written")


def merged(model: Any) -> Any:
    """peft's merge_and_unload: W + B·A·scale into each base layer; the peft wrappers are removed."""
    return model.merge_and_unload()


def untied(model: Any) -> bool:
    """lm_head and the input embeddings are different tensors (where the config says they are tied)."""
    out, inp = model.get_output_embeddings(), model.get_input_embeddings()
    if out is None or inp is None or getattr(out, "weight", None) is None:
        return False
    return out.weight.data_ptr() != inp.weight.data_ptr()


def _cast_state_dict(model: Any, torch_dtype: str, tied: bool) -> dict[str, Any]:
    """The model's tensors in ``torch_dtype`` (the caller's model is not converted in place); where the config ties
    them, each shared tensor once, under its first name (the input embeddings, as transformers keeps it)."""
    import torch

    dtype = getattr(torch, torch_dtype)
    seen: set[tuple[int, tuple[int, ...]]] = set()
    out = {}
    for name, tensor in model.state_dict().items():
        key = (tensor.data_ptr(), tuple(tensor.shape))
        if tied and tensor.numel() and key in seen:
            continue
        seen.add(key)
        out[name] = tensor.detach().to("cpu", dtype) if tensor.is_floating_point() else tensor.detach().cpu()
    return out


def save_full(model: Any, folder: Path, torch_dtype: str, tied: bool) -> None:
    """save_pretrained in ``torch_dtype`` (safetensors, sharded as transformers shards); config.json is rewritten
    afterwards by the caller."""
    dequantized(model)  # a model loaded from a GGUF: its quantizer would refuse to save the floats it holds
    model.save_pretrained(str(folder), state_dict=_cast_state_dict(model, torch_dtype, tied))


def save_adapter(model: Any, folder: Path, torch_dtype: str, base: Path) -> None:
    """peft's adapter files, the weights in ``torch_dtype``, pointing at the patched base by its final path
    (transformers resolves a relative path from the working folder, not from the adapter's)."""
    import torch
    from safetensors.torch import load_file, save_file

    model.save_pretrained(str(folder), safe_serialization=True)
    path = folder / ADAPTER_WEIGHTS
    dtype = getattr(torch, torch_dtype)
    tensors = {k: v.to(dtype) if v.is_floating_point() else v for k, v in load_file(str(path)).items()}
    save_file(tensors, str(path), metadata={"format": "pt"})
    config = json.loads((folder / ADAPTER_CONFIG).read_text(encoding="utf-8"))
    config["base_model_name_or_path"] = str(base)
    (folder / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def save_dequantized(gguf: Path, folder: Path, torch_dtype: str) -> None:
    """A GGUF source's weights, dequantized by transformers (``gguf_file=``) as training loaded them."""
    import torch
    from transformers import AutoModelForCausalLM

    from ropectl.runtime import quiet_transformers

    quiet_transformers()
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                 dtype=getattr(torch, torch_dtype))
    save_full(model, folder, torch_dtype, bool(getattr(model.config, "tie_word_embeddings", False)))


def listed(folder: Path, skip: str | None = None) -> list[str]:
    """Files under ``folder`` (relative, sorted), leaving out the ``skip`` subfolder."""
    out = []
    for root, dirs, files in os.walk(folder):
        rel = Path(root).relative_to(folder)
        if skip and rel == Path("."):
            dirs[:] = [d for d in dirs if d != skip]
        out += [(rel / f).as_posix() for f in files]
    return sorted(out)


def gguf_notes(source: Path | None, output: Path, layout: str) -> list[str]:
    """A GGUF source: the folder written is safetensors; llama.cpp's own converter turns it back."""
    if source is None or source.suffix.lower() != ".gguf":
        return []
    folder = output / "base" if layout == "adapter" else output
    line = (f"trained from a GGUF (dequantized): the output is a safetensors folder; for llama.cpp convert it back "
            f"with llama.cpp's converter: python convert_hf_to_gguf.py {folder} --outfile {folder}.gguf --outtype f16")
    if layout == "adapter":
        line += (f", and the adapter with: python convert_lora_to_gguf.py {output} --base {folder} "
                 f"--outfile {output}-lora.gguf (llama.cpp --lora)")
    return [line]
