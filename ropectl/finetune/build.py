"""The model a run trains: built from the PATCHED config (transformers 5 ignores ``config.rope_scaling`` set after
``from_pretrained``), its rotary modules checked against ropectl's frequencies before any step, LoRA added by peft.

A GGUF file is dequantized by transformers' own ``gguf_file=`` loader (``ModelSource.kwargs``), as eval-ppl loads it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ropectl.errors import VerificationError
from ropectl.finetune.spec import LORA_TARGETS, FinetuneSpec
from ropectl.runtime import MethodState, ModelSource, quiet_transformers
from ropectl.schema.read import read_model_rope


def build_model(source: ModelSource, config: Mapping[str, Any], device: str) -> Any:
    """fp32 weights (the optimizer's master copy; bf16 runs under autocast) with the patched RoPE, verified."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from ropectl.io.gguf_once import parse_once
    from ropectl.runtime import from_pretrained_sdpa, no_gguf_bar

    quiet_transformers()
    with parse_once(), no_gguf_bar():  # a GGUF's config and weights from one parse of its metadata
        base = AutoConfig.from_pretrained(source.path, **source.kwargs)
        patched = type(base).from_dict(dict(config))
        model = from_pretrained_sdpa(AutoModelForCausalLM, source.path, config=patched, dtype=torch.float32,
                                     **source.kwargs)
    model.config.use_cache = False
    if "gguf_file" in source.kwargs:
        dequantized(model)
    verify_patched_rope(model, config)
    return model.to(device)


def dequantized(model: Any) -> None:
    """transformers' GGUF loader dequantizes every tensor but still marks the model as GGUF-quantized, which
    Trainer refuses and save_pretrained refuses to serialize (or would write as a quantization_config): the weights
    are plain floats, so the marks go (checked first). A model without the GGUF mark is left as it is."""
    if not _gguf_marked(model):
        return
    if any(not p.dtype.is_floating_point for p in model.parameters()):
        raise VerificationError("the GGUF weights were not fully dequantized by transformers",
                                "convert the GGUF to a safetensors folder first, then fine-tune that")
    model.is_quantized = False
    model.hf_quantizer = None
    for holder in (model, model.config):
        if hasattr(holder, "quantization_config"):
            delattr(holder, "quantization_config")


def _gguf_marked(model: Any) -> bool:
    for mark in (getattr(getattr(model, "hf_quantizer", None), "quantization_config", None),
                 getattr(model.config, "quantization_config", None)):
        method = mark.get("quant_method") if isinstance(mark, Mapping) else getattr(mark, "quant_method", None)
        if str(getattr(method, "value", method)) == "gguf":
            return True
    return False


def patched_state(config: Mapping[str, Any], label: str) -> MethodState:
    """The evaluation engine's view of the patched config: what its rotary modules must compute."""
    rope = read_model_rope(config)
    return MethodState(label, None, dict(config), rope.rope, dict(rope.layer_ropes))


def verify_patched_rope(model: Any, config: Mapping[str, Any], *, problem: str | None = None,
                        fix: str | None = None) -> None:
    """Every rotary module's inv_freq and attention factor equal ropectl's float64 reference (rel <= 1e-5, or the
    buffer's bf16/fp16 precision): a silent ``rope_theta`` fallback or a scaling dropped on the way into the model is
    refused before training, and a model trained with other RoPE is refused before it is written. ``problem``/``fix``:
    the caller's words for a mismatch (``ropectl.eval.engines.hf.rotary.verify_rotary``)."""
    from ropectl.runtime import rotary_modules, verify_rotary

    modules = rotary_modules(model)
    if not modules:
        raise VerificationError("found no rotary embedding module in the model",
                                "report this model type; finetune cannot check its RoPE")
    state = patched_state(config, "patched")
    for _, _, module in modules:
        verify_rotary(module, state, None, problem=problem, fix=fix)


def add_lora(model: Any, spec: FinetuneSpec) -> Any:
    """A peft LoRA model: r, alpha, q/k/v/o projections; ``--train-embeddings-norms`` also trains the embeddings and
    every norm in full (LongLoRA's "trainable embeddings and norms", as peft's ``modules_to_save``)."""
    from peft import LoraConfig, get_peft_model

    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    targets = [t for t in LORA_TARGETS if t in names]
    if not targets:
        raise VerificationError(f"the model has none of the LoRA target modules {', '.join(LORA_TARGETS)}",
                                "fine-tune it in full (drop --lora)")
    save = embeddings_and_norms(model) if spec.train_embeddings_norms else None
    extra = {}
    if save and _ties_embeddings(model):
        # peft copies a modules_to_save embedding; without this the tied lm_head keeps the old copy and the ties
        # break in training and merge (peft #2777). peft < 0.18 has no such option: refused rather than broken.
        if "ensure_weight_tying" not in {f.name for f in dataclasses.fields(LoraConfig)}:
            raise VerificationError("this peft cannot keep tied embeddings tied while training them",
                                    "upgrade peft (pip install -U 'ropectl[finetune]'), or drop --train-embeddings-norms")
        extra["ensure_weight_tying"] = True
    config = LoraConfig(r=spec.lora, lora_alpha=spec.lora_scale, target_modules=targets, lora_dropout=0.0,
                        task_type="CAUSAL_LM", modules_to_save=save, **extra)  # peft's default: biases frozen
    return get_peft_model(model, config)


def _ties_embeddings(model: Any) -> bool:
    out = model.get_output_embeddings()
    return out is not None and out.weight is model.get_input_embeddings().weight


def embeddings_and_norms(model: Any) -> list[str]:
    """The module names (last part) of the input embeddings and of every normalization layer."""
    embed = model.get_input_embeddings()
    out = set()
    for name, module in model.named_modules():
        if module is embed or "Norm" in type(module).__name__:
            out.add(name.rsplit(".", 1)[-1])
    return sorted(out)


def trainable_count(model: Any) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
