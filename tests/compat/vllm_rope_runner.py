"""Run in the vLLM venv (it never imports ropectl): the rotary embeddings vLLM's own model classes build, and
transformers' for comparison, per job.

Usage: python vllm_rope_runner.py JOBS.json OUT.json. Each job is {"name", "model", "hf_overrides", "reference"}.
For vLLM: ``ModelConfig`` (its config loading, ``--hf-overrides`` and derived max length), then the architecture's
model class built on CPU in a one-process group, and every ``RotaryEmbedding`` module it holds (the model file's own
``get_rope`` call). For transformers: the text model's rotary class from ``reference`` (a patched folder).
Both sides give cos and sin (times their attention scale) at a few positions.

vLLM's multimodal model modules import torchvision, which pip brings only as a CUDA build that cannot load beside the
CPU torch; an import-only stand-in (stand_in/sitecustomize.py, on PYTHONPATH so that vLLM's registry subprocesses
get it too) takes its place, and raises if anything is called.
"""

from __future__ import annotations

import json
import sys

POSITIONS = (0, 1, 7, 300, 500)


def _rows(cos, sin, scale: float = 1.0) -> dict:  # noqa: ANN001
    return {"cos": [[float(v) * scale for v in row] for row in cos], "sin": [[float(v) * scale for v in row] for row in sin]}


def vllm_side(job: dict, port: int) -> dict:
    import torch
    from vllm.config import ModelConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.model_executor.layers.rotary_embedding.base import RotaryEmbeddingBase
    from vllm.model_executor.layers.rotary_embedding.phi3_long_rope_scaled_rope import (
        Phi3LongRoPEScaledRotaryEmbedding,
    )
    from vllm.model_executor.model_loader.utils import get_model_architecture

    try:
        mc = ModelConfig(model=job["model"], skip_tokenizer_init=True, hf_overrides=job.get("hf_overrides") or {},
                         dtype="float32", enforce_eager=True, max_model_len=job.get("max_model_len"))
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:1500]}
    out: dict = {"max_model_len": int(mc.max_model_len)}
    vc = VllmConfig(model_config=mc)
    try:
        with set_current_vllm_config(vc):
            init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                         distributed_init_method=f"tcp://127.0.0.1:{port}")
            initialize_model_parallel(1, 1)
            cls, _ = get_model_architecture(mc)
            with torch.device("cpu"):
                model = cls(vllm_config=vc, prefix="")
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"[:1500]
        return out
    finally:
        from vllm.distributed import parallel_state

        parallel_state.destroy_model_parallel()
        parallel_state.destroy_distributed_environment()
    ropes: dict = {}
    for name, module in model.named_modules():
        rotary = isinstance(module, (RotaryEmbeddingBase, Phi3LongRoPEScaledRotaryEmbedding))
        if rotary and "visual" not in name and "vision" not in name:
            key = str(id(module))
            entry = ropes.setdefault(key, {"modules": [], "layer": None, "kind": type(module).__name__})
            entry["modules"].append(name)
            if entry["layer"] is None:
                entry.update(_cache_rows(module))
    for entry in ropes.values():
        entry["layers"] = sorted({_layer_index(n) for n in entry.pop("modules")} - {None})
        entry.pop("layer")
    out["ropes"] = list(ropes.values())
    return out


def _layer_index(name: str) -> int | None:
    parts = name.split(".")
    return next((int(p) for a, p in zip(parts, parts[1:]) if a == "layers" and p.isdigit()), None)


def _cache_rows(module) -> dict:  # noqa: ANN001
    """The rows its forward reads at POSITIONS. LongRoPE (phi3_long_rope_scaled_rope.py) holds a short-factor table
    of original_max_position_embeddings rows, then a long-factor one; forward offsets every position into the long
    one when the model's max_model_len exceeds the original length (``use_long_rope``)."""
    long_rope = hasattr(module, "long_short_cos_sin_cache")
    cache = (module.long_short_cos_sin_cache if long_rope else module.cos_sin_cache).float()
    offset = module.original_max_position_embeddings if long_rope and module.use_long_rope else 0
    half = cache.shape[-1] // 2
    positions = [p for p in POSITIONS if p + offset < cache.shape[0]]
    rows = [p + offset for p in positions]
    extra = {"long_factors": bool(module.use_long_rope)} if long_rope else {}
    return {"positions": positions, "cache_length": int(cache.shape[0]) - offset, **extra,
            **_rows(cache[rows, :half].tolist(), cache[rows, half:].tolist())}


def hf_side(folder: str, positions: list[int]) -> dict:
    """cos/sin, one column per frequency, per layer type, from transformers' rotary class."""
    import inspect

    import torch
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_MAPPING

    text = AutoConfig.from_pretrained(folder).get_text_config()
    module = sys.modules[MODEL_MAPPING[type(text)].__module__]
    classes = [c for n, c in vars(module).items() if n.endswith("RotaryEmbedding") and isinstance(c, type)
               and "Vision" not in n and "Audio" not in n]
    rotary = classes[0](config=text)
    ids = torch.tensor([positions])
    layer_types = sorted(set(getattr(text, "layer_types", None) or ["main"]))
    takes_type = "layer_type" in inspect.signature(rotary.forward).parameters
    out = {"layer_types": list(getattr(text, "layer_types", None) or [])}
    for layer_type in layer_types if takes_type else ["main"]:
        x = torch.zeros(1, dtype=torch.float32)
        try:
            out_ = rotary(x, ids, layer_type) if takes_type else rotary(x, ids)
        except Exception:  # multimodal RoPE: (3, batch, seq) position ids, equal for text
            cos, sin = rotary(x, ids[None].expand(3, 1, -1))
            out_ = (cos[0], sin[0])
        if torch.is_tensor(out_) and out_.is_complex():  # Llama 4: freqs_cis, cos + i sin per frequency
            out_ = (out_.real.float(), out_.imag.float())
        cos, sin = out_
        cos, sin, half = cos[0], sin[0], cos.shape[-1] // 2
        if torch.equal(cos[:, :half], cos[:, half:]) and torch.equal(sin[:, :half], sin[:, half:]):
            cos, sin = cos[:, :half], sin[:, :half]  # rotate_half's layout repeats each frequency; gpt-oss's does not
        out[layer_type] = _rows(cos.tolist(), sin.tolist())
    return out


def main() -> None:
    jobs = json.loads(open(sys.argv[1]).read())
    results = {}
    for i, job in enumerate(jobs):
        result = vllm_side(job, 29600 + i)
        if job.get("reference") and result.get("ropes"):
            result["hf"] = hf_side(job["reference"], result["ropes"][0]["positions"])
        results[job["name"]] = result
        with open(sys.argv[2], "w") as fh:  # after each job: a crash keeps the earlier results
            json.dump(results, fh)


if __name__ == "__main__":
    main()
