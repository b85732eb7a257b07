"""Fine-tuned checkpoints for the tests: a tiny seeded Llama built with its patched config, wrapped in a peft LoRA
whose weights are perturbed (so a merge changes the weights), then written by ``write_checkpoint``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RANK, ALPHA = 4, 8
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
PROVENANCE = {"base_model": "tiny-llama", "method": "linear:4", "mode": "pose", "window": 256, "steps": 3,
              "tokens": 3072, "data": "tiny", "held_out": ["doc04.txt"], "seed": 0, "lr": 2e-5,
              "lora": {"r": RANK, "alpha": ALPHA}}


def patched_config(source: Path, spec: str) -> dict[str, Any]:
    """The config the one patch path writes for ``spec`` (ropectl.schema.apply), record included."""
    from ropectl.rope.methods import parse_spec
    from ropectl.schema.apply import plan_config

    return plan_config(json.loads((source / "config.json").read_text()), parse_spec(spec)).config


def build_model(source: Path, config: dict[str, Any]) -> Any:
    """The source's weights under the patched config, as training builds it (the config before the model)."""
    import tempfile

    from transformers import AutoConfig, AutoModelForCausalLM

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "config.json").write_text(json.dumps(config))
        hf_config = AutoConfig.from_pretrained(tmp)
    return AutoModelForCausalLM.from_pretrained(str(source), config=hf_config).eval()


def lora(model: Any, seed: int = 0, modules_to_save: tuple[str, ...] = (), **extra: Any) -> Any:
    """peft LoRA on q/k/v/o with lora_A and lora_B drawn from a seeded normal: B·A is not zero."""
    import torch
    from peft import LoraConfig, get_peft_model

    peft_model = get_peft_model(model, LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=list(TARGETS),
                                                  modules_to_save=list(modules_to_save) or None, **extra))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, weight in peft_model.named_parameters():
            if "lora_" in name:
                weight.copy_(torch.randn(weight.shape, generator=gen) * 0.2)
    return peft_model.eval()


def logits(model: Any, ids: list[int]) -> Any:
    import torch

    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0].double()


def ids(n: int, seed: int = 3) -> list[int]:
    import random

    rng = random.Random(seed)
    return [1] + [rng.randrange(3, 70) for _ in range(n - 1)]


def write(out: Path, source: Path, spec: str, layout: str, seed: int = 0, **kwargs: Any) -> tuple[Any, Any]:
    """Write ``layout`` (full, merged, adapter) of the source fine-tuned under ``spec``; returns (written, the
    in-memory model's logits on ``ids(300)`` before writing)."""
    import torch
    from transformers import AutoTokenizer

    from ropectl.finetune.output import write_checkpoint

    config = patched_config(source, spec)
    model = build_model(source, config)
    if layout == "full":
        with torch.no_grad():  # a full fine-tune moved some weights
            model.model.layers[0].self_attn.q_proj.weight.add_(0.05)
    else:
        model = lora(model, seed)
    before = logits(model, ids(300))
    written = write_checkpoint(out, model, AutoTokenizer.from_pretrained(str(source)), config,
                               {**PROVENANCE, "method": spec}, merge=layout == "merged",
                               dtype=kwargs.pop("dtype", "fp32"), force=kwargs.pop("force", False), source=source,
                               **kwargs)
    return written, before


def write_layouts(root: Path, source: Path, spec: str = "linear:4") -> dict[str, tuple[Any, Any]]:
    """Each layout of one fine-tune (the same seeded LoRA for merged and adapter): {layout: (written, logits)}."""
    return {layout: write(root / layout, source, spec, layout) for layout in ("full", "merged", "adapter")}
