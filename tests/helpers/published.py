"""Tiny trainable copies of the published configs in tests/fixtures/configs: 2 layers, tiny widths and vocabulary,
seeded random weights, a character tokenizer, and every RoPE, attention and layer-type key exactly as published.

What is shrunk: widths (hidden, intermediate, LoRA ranks, experts), the vocabulary (and the special token ids
with it), the layer count, and the vision tower. What is kept: the rope keys (theta, scaling, max and original
positions, partial rotary), the head size the RoPE rotates (``head_dim``, or hidden / heads where the config
derives it), sliding windows, chunked attention, dual chunk attention, and one layer of each layer type
(``layer_types``, ``sliding_window_pattern``, ``no_rope_layers``). ``config.json`` is written in the published
form (``rope_scaling`` stays ``rope_scaling``), not in the form transformers would save, so ropectl reads what a
user's download holds; the weights are those of the model transformers builds from it.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from tests.helpers.checkpoints import VOCAB
from tests.helpers.eval_data import add_char_tokenizer

FIXTURES = Path(__file__).parents[1] / "fixtures" / "configs"
LAYERS, HIDDEN, HEADS = 2, 64, 2
# Width keys set outright (present in the published config or not, they are only widths).
WIDTHS = {"intermediate_size": 64, "intermediate_size_mlp": 64, "moe_intermediate_size": 32, "q_lora_rank": 16,
          "kv_lora_rank": 16, "qk_nope_head_dim": 8, "v_head_dim": 8}
EXPERTS, PER_TOKEN = ("num_local_experts", "num_experts", "n_routed_experts"), ("num_experts_per_tok", "experts_per_token")
GROUPS = ("n_group", "topk_group", "first_k_dense_replace")
TOKENS = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}  # the character tokenizer's
VISION = {"depth": 1, "num_hidden_layers": 1, "hidden_size": 32, "intermediate_size": 32, "num_heads": 2,
          "num_attention_heads": 2, "vision_output_dim": 32, "projector_input_dim": 32, "projector_output_dim": 32}


def names() -> list[str]:
    return sorted(p.stem for p in FIXTURES.glob("*.json"))


def published(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def _rotated_head(text: dict[str, Any]) -> int:
    """The head size transformers gives this text config (its own default where the config names none)."""
    from transformers import AutoConfig

    config = AutoConfig.for_model(text["model_type"], **{k: v for k, v in text.items() if k != "model_type"})
    config = config.get_text_config()  # Qwen2.5-VL publishes its text keys at the top level
    return int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)


def _two_of_each(values: list[Any]) -> list[Any]:
    """Two layers that hold every distinct value among the first layers' (first of each kind, in order)."""
    kinds = list(dict.fromkeys(values))
    return (kinds + [kinds[0]] * LAYERS)[:LAYERS] if len(kinds) <= LAYERS else kinds[:LAYERS]


def _shrink_text(text: dict[str, Any]) -> None:
    mla = "qk_rope_head_dim" in text
    explicit_head = text.get("head_dim") is not None
    head = None if mla or explicit_head else _rotated_head(text)
    kv_equal = text.get("num_key_value_heads") == text.get("num_attention_heads")
    text.update(num_hidden_layers=LAYERS, num_attention_heads=HEADS, vocab_size=VOCAB,
                hidden_size=HIDDEN if head is None else HEADS * head)  # hidden / heads = the published head size
    text["num_key_value_heads"] = HEADS if kv_equal else 1  # also where a class default would exceed HEADS
    text.update({k: v for k, v in WIDTHS.items() if k in text})
    text.update({k: 4 for k in EXPERTS if k in text})
    text.update({k: 2 for k in PER_TOKEN if k in text})
    text.update({k: 1 for k in GROUPS if k in text})
    text.update({k: v for k, v in TOKENS.items() if text.get(k) is not None})
    if isinstance(text.get("layer_types"), list):
        text["layer_types"] = _two_of_each(text["layer_types"])
    if "sliding_window_pattern" in text:  # every Nth layer global: 2 makes the second one global
        text["sliding_window_pattern"] = LAYERS
    if isinstance(text.get("no_rope_layers"), list):
        text["no_rope_layers"] = _two_of_each(text["no_rope_layers"])
    if isinstance(text.get("moe_layers"), list):
        text["moe_layers"] = [i for i in text["moe_layers"] if i < LAYERS]
    for key in ("dtype", "torch_dtype"):
        if key in text:
            text[key] = "float32"  # the weights written are float32


def _shrink_vision(vision: dict[str, Any], text_hidden: int) -> None:
    vision.update({k: v for k, v in VISION.items() if k in vision})
    if "head_dim" in vision:
        vision["head_dim"] = VISION["hidden_size"] // VISION["num_heads"]
    if "out_hidden_size" in vision:
        vision["out_hidden_size"] = text_hidden
    for key in ("fullatt_block_indexes", "deepstack_visual_indexes"):
        if key in vision:
            vision[key] = [0]


def _layer_types(text: dict[str, Any]) -> list[str]:
    """The layer types transformers derives for this text config (its class default where the config names none)."""
    from transformers import AutoConfig

    config = AutoConfig.for_model(text["model_type"], **{k: v for k, v in text.items() if k != "model_type"})
    return list(getattr(config.get_text_config(), "layer_types", None) or ())


def tiny_config(config: dict[str, Any]) -> dict[str, Any]:
    """The published config with its sizes shrunk and every RoPE, attention and layer-type key kept."""
    out = copy.deepcopy(config)
    text = out.get("text_config", out)
    kinds = _layer_types(text)
    _shrink_text(text)
    if set(_layer_types(text)) != set(kinds):  # a class-default pattern (Gemma 3's every 6th layer) left a kind out
        text["layer_types"] = _two_of_each(kinds)
    if isinstance(out.get("vision_config"), dict):
        _shrink_vision(out["vision_config"], text["hidden_size"])
        if out is not text:
            out.update({k: v for k, v in TOKENS.items() if out.get(k) is not None})
            for key in ("dtype", "torch_dtype"):
                if key in out:
                    out[key] = "float32"
    return out


def model_class(config: dict[str, Any]) -> Any:
    """The class the config's ``architectures`` names (what from_pretrained of the published checkpoint builds)."""
    import transformers

    for name in config.get("architectures") or ():
        cls = getattr(transformers, name, None)
        if cls is not None:
            return cls
    return transformers.AutoModelForCausalLM


def build_tiny(name: str, folder: Path, seed: int = 0) -> Path:
    """A 2-layer seeded copy of published config ``name`` in ``folder``: safetensors, char tokenizer, and
    config.json in the published form."""
    import torch
    from transformers import AutoConfig

    config = tiny_config(published(name))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    hf_config = AutoConfig.from_pretrained(str(folder))
    torch.manual_seed(seed)
    cls = model_class(config)
    model = cls.from_config(hf_config) if cls.__name__.startswith("Auto") else cls(hf_config)
    model.eval().save_pretrained(folder, safe_serialization=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))  # the published form, not transformers'
    for extra in ("generation_config.json",):
        (folder / extra).unlink(missing_ok=True)
    return add_char_tokenizer(folder)


# Sizes that keep the head dim (so LongRoPE's per-pair factors still fit) with 2 heads: tiny_published's.
TINY = {"num_hidden_layers": 2, "intermediate_size": 64, "vocab_size": VOCAB, "bos_token_id": 1, "eos_token_id": 2,
        "pad_token_id": 0, "tie_word_embeddings": False}


def tiny_published(name: str, folder: Path, seed: int = 0, **changes: Any) -> Path:
    """The published ``name`` config with 2 layers of 2 heads of its own head dim, seeded random weights (no
    tokenizer; ``build_tiny`` above shrinks every family's widths and adds a character tokenizer)."""
    import shutil

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
