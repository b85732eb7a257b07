"""References the eval tests compare ropectl with: transformers' own loss, greedy generation and loading, and
checkpoints patched by hand-written configs (never through ropectl's config writer)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ropectl.eval.tasks.ppl import EvalSpec


def naive_nll_sum(model, ids) -> float:
    """The reference: transformers' own mean loss over all n-1 predictions, times n-1."""
    import torch

    with torch.inference_mode():
        out = model(input_ids=ids[None], labels=ids[None])
    return float(out.loss) * (len(ids) - 1)


def load(folder: Path):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="sdpa").eval()


def hand_written(method: str, theta: float, d: int, trained: int, base: dict | None = None) -> dict:
    """Each method as transformers 5 reads it, written by hand from the formulas, so the reference model
    never passes through ropectl's own config writer. ``base`` is the section being scaled: p-RoPE
    (Gemma 4's proportional type) keeps its type and partial factor and scales within them."""
    if base and base.get("rope_type") == "proportional":
        return {"proportional:2": {**base, "factor": 2.0},
                "ntk:2": {**base, "rope_theta": theta * 2.0 ** (d / (d - 2))}}[method]
    return {
        "none": {"rope_type": "default", "rope_theta": theta},
        "yarn:2": {"rope_type": "yarn", "rope_theta": theta, "factor": 2.0, "original_max_position_embeddings": trained},
        "ntk:2": {"rope_type": "default", "rope_theta": theta * 2.0 ** (d / (d - 2))},
        "dynamic:2": {"rope_type": "dynamic", "rope_theta": theta, "factor": 2.0},
        "linear:2": {"rope_type": "linear", "rope_theta": theta, "factor": 2.0},
    }[method]


def patched_model(model: Path, method: str, folder: Path):
    """The method applied by a hand-written config loaded from scratch by transformers (no switching).

    Gemma3 nests its rope per layer type: the method goes to full attention, sliding layers keep their base.
    """
    import torch
    from transformers import AutoModelForCausalLM

    shutil.copytree(model, folder)
    config = json.loads((model / "config.json").read_text())
    config.pop("rope_scaling", None)
    rope = config["rope_parameters"]
    nested = "full_attention" in rope
    d = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    section = rope["full_attention"] if nested else rope
    if section.get("rope_type") == "proportional":  # global layers have their own, wider head
        d = _global_head_dim(config) or d
    if config.get("head_dim", 0) is None:  # transformers' yarn multiplies config.head_dim (Mixtral: null)
        config["head_dim"] = d
    new = hand_written(method, section["rope_theta"], d, config["max_position_embeddings"], section)
    config["rope_parameters"] = {**rope, "full_attention": new} if nested else new
    (folder / "config.json").write_text(json.dumps(config))
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


def _global_head_dim(config: dict) -> int | None:
    """Gemma 4's full-attention head width: ``global_head_dim`` before transformers 5.24, then a
    ``per_layer_config`` entry for each full-attention layer."""
    full = [str(i) for i, t in enumerate(config.get("layer_types") or []) if t == "full_attention"]
    per_layer = config.get("per_layer_config") or {}
    widths = [per_layer[i]["head_dim"] for i in full if "head_dim" in per_layer.get(i, {})]
    return widths[0] if widths else config.get("global_head_dim")


def doc_tokens(result, doc: str, cache_spec: EvalSpec):
    """The document's tokens straight from its file and the tokenizer: not through ropectl's corpus loader."""
    import torch
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(cache_spec.model)
    text = (Path(cache_spec.dataset) / doc).read_text(encoding="utf-8")
    return torch.as_tensor(tok(text)["input_ids"])


def greedy_generate(model, ids: tuple[int, ...], n: int) -> tuple[int, ...]:
    """transformers' own greedy decoding of n tokens after the prompt ``ids`` (KV cache and all)."""
    import torch

    prompt = torch.tensor([ids], dtype=torch.long)
    with torch.inference_mode():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n, min_new_tokens=n,
                             do_sample=False, num_beams=1, pad_token_id=0)
    return tuple(int(x) for x in out[0, prompt.shape[1]:])


def gguf_model(smollm2: Path, method: str | None = None):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from ropectl.patch import apply_to_config
    from ropectl.rope.methods import parse_spec

    kwargs = {"gguf_file": smollm2.name}
    config = AutoConfig.from_pretrained(smollm2.parent, **kwargs)
    if method:
        new, _ = apply_to_config(config.to_dict(), parse_spec(method), schema="v5")
        config = type(config).from_dict(new)
    return AutoModelForCausalLM.from_pretrained(smollm2.parent, config=config, dtype=torch.float32, **kwargs).eval()
