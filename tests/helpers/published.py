"""Tiny seeded checkpoints of published configs (tests/fixtures/configs): the config as published, its RoPE and
attention keys untouched, with the sizes cut to 2 layers and a 128-token vocabulary. ``config.json`` is the
published form (v4 ``rope_scaling`` included), not transformers' re-save of it; the weights are built from it by
transformers' own ``from_config``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from tests.helpers.checkpoints import VOCAB

FIXTURES = Path(__file__).parents[1] / "fixtures" / "configs"
# Sizes that keep the head dim (so LongRoPE's per-pair factors still fit) with 2 heads.
TINY = {"num_hidden_layers": 2, "intermediate_size": 64, "vocab_size": VOCAB, "bos_token_id": 1, "eos_token_id": 2,
        "pad_token_id": 0, "tie_word_embeddings": False}


def published(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def tiny_published(name: str, folder: Path, seed: int = 0, **changes: Any) -> Path:
    """The published ``name`` config with 2 layers of 2 heads of its own head dim, seeded random weights."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = published(name)
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    sizes = {"hidden_size": 2 * head_dim, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": head_dim}
    config = {**config, **TINY, **sizes, **changes}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder), dtype=torch.float32).eval()
    staging = folder.with_name(folder.name + "-save")
    model.save_pretrained(staging, safe_serialization=True)
    for path in staging.glob("*.safetensors"):
        shutil.move(str(path), folder / path.name)
    shutil.rmtree(staging)
    return folder
