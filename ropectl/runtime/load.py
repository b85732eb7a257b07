"""Loading a transformers model once per (path, device, dtype): SDPA attention (eager where a model has none), the
vision-language class where the language model is only reachable through it, no per-tensor progress bars."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ropectl.io.resolve import config_folder
from ropectl.runtime.model import quiet_transformers
from ropectl.runtime.reuse import freeze, shared

TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


@dataclass
class LoadedModel:
    model: Any
    tokenizer: Any
    device: str
    dtype: str
    active: str | None = None

    def input_device(self) -> Any:
        return self.model.get_input_embeddings().weight.device


@contextlib.contextmanager
def no_gguf_bar() -> Iterator[None]:
    """transformers' GGUF loader draws a plain tqdm bar per tensor, which our progress bar replaces."""
    try:
        import transformers.modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:  # pragma: no cover - transformers without GGUF support
        yield
        return
    original = gguf_utils.tqdm
    gguf_utils.tqdm = functools.partial(original, disable=True)
    try:
        yield
    finally:
        gguf_utils.tqdm = original


def load_model(path: str, kwargs: Mapping[str, Any], tokenizer: Any, device: str, dtype: str,
               device_map: str | None = None) -> LoadedModel:
    """Weights loaded once, in ``dtype``, with SDPA attention (eager only where a model has no SDPA)."""
    key = ("model", path, freeze(kwargs), device, dtype, device_map)
    return shared(key, lambda: _load_model(path, kwargs, tokenizer, device, dtype, device_map))


def _load_model(path: str, kwargs: Mapping[str, Any], tokenizer: Any, device: str, dtype: str,
                device_map: str | None) -> LoadedModel:
    import torch

    if device == "cpu":
        from ropectl.runtime.cpu import keep_freed_memory

        keep_freed_memory()
    quiet_transformers()
    torch_dtype = getattr(torch, TORCH_DTYPES[dtype])
    extra: dict[str, Any] = {"device_map": "auto"} if device_map == "auto" else {}
    auto = auto_class(path, kwargs)
    with no_gguf_bar():
        model = from_pretrained_sdpa(auto, path, dtype=torch_dtype, **extra, **kwargs)
    if device_map != "auto":
        model = model.to(device)
    return LoadedModel(model.eval(), tokenizer, device, dtype)


# How transformers refuses SDPA for an architecture that has none (Gemma 2's soft-capping, gpt-oss's sinks): 4.x
# names "sdpa", 5.x "torch.nn.functional.scaled_dot_product_attention".
_NO_SDPA = ("sdpa", "scaled_dot_product_attention")


def from_pretrained_sdpa(auto: Any, path: str, **kwargs: Any) -> Any:
    """``auto.from_pretrained`` with SDPA attention, or eager where transformers has no SDPA for the model."""
    try:
        return auto.from_pretrained(path, attn_implementation="sdpa", **kwargs)
    except ValueError as exc:
        if not any(word in str(exc).lower() for word in _NO_SDPA):
            raise
    return auto.from_pretrained(path, attn_implementation="eager", **kwargs)


def auto_class(path: str, kwargs: Mapping[str, Any]) -> Any:
    """AutoModelForCausalLM, or the image-text-to-text class for vision-language models (Qwen2-VL, Qwen3-VL)
    whose language model is only reachable through it; their text-only forward is a causal LM."""
    from transformers import AutoModelForCausalLM
    from transformers.models.auto import modeling_auto

    if str(path).lower().endswith(".gguf") or "gguf_file" in kwargs:  # a GGUF holds a causal LM's text model only
        return AutoModelForCausalLM
    from transformers import AutoConfig, AutoModelForImageTextToText

    config = AutoConfig.from_pretrained(config_folder(path), **kwargs)
    causal = modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    vlm = modeling_auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES
    if config.model_type not in causal and config.model_type in vlm:
        return AutoModelForImageTextToText
    return AutoModelForCausalLM
