"""GGUF metadata: read its key/value section (``gguf_kv``) and express it as an HF-style config dict."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ropectl.errors import GGUFError
from ropectl.families.gguf import GGUF_ARCHS
from ropectl.rope.methods import gguf_owner

# gguf.Keys constant -> the config key it means (the yarn betas; other methods' keys are their modules')
_SCALING_KEYS = {"SCALING_YARN_BETA_FAST": "beta_fast", "SCALING_YARN_BETA_SLOW": "beta_slow"}
# The pre-GGUF-v3 linear factor key, which gguf.Keys no longer names (llama.cpp still reads it).
LEGACY_SCALE_LINEAR = "{arch}.rope.scale_linear"
# ropectl's own record of the unscaled base; llama.cpp ignores keys outside its namespace.
BASE_THETA_KEY = "ropectl.base.rope_theta"
BASE_CONTEXT_KEY = "ropectl.base.context_length"
METHOD_KEY = "ropectl.method"


def read_gguf_metadata(path: Path) -> dict[str, Any]:
    """All key/value metadata of a GGUF file, as plain Python values (tokenizer arrays skipped)."""
    from ropectl.io.gguf_kv import GGUFFormatError, read_kv

    try:
        return read_kv(path)
    except (GGUFFormatError, ValueError, OSError) as exc:  # mmap of an empty or special file raises OSError/ValueError
        if isinstance(exc, OSError) and not isinstance(exc, (FileNotFoundError, IsADirectoryError)) and exc.errno:
            raise
        raise GGUFError(
            f"'{path}' is not a readable GGUF file ({type(exc).__name__}: {exc})",
            "check the download is complete; re-download or re-convert it",
        ) from None


def gguf_arch(meta: Mapping[str, Any], path: Path) -> tuple[str, str, str]:
    arch = str(meta.get("general.architecture") or "")
    if arch not in GGUF_ARCHS:
        raise GGUFError(
            f"'{path.name}' is a GGUF of architecture '{arch or 'unknown'}', which ropectl does not handle",
            f"use a GGUF of a RoPE architecture: {', '.join(GGUF_ARCHS)}",
        )
    model_type, layout = GGUF_ARCHS[arch]
    return arch, model_type, layout


def gguf_config(meta: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """An HF-style config dict that means what the GGUF metadata means to llama.cpp."""
    from gguf import Keys  # gguf-py's constants: the one home of the key names (imported only for a GGUF)

    arch, model_type, layout = gguf_arch(meta, path)

    def get(key: str, default: Any = None) -> Any:
        return meta.get(key.format(arch=arch), default)

    heads = get(Keys.Attention.HEAD_COUNT)
    hidden = get(Keys.LLM.EMBEDDING_LENGTH)
    if not heads or not hidden or not get(Keys.LLM.CONTEXT_LENGTH):
        raise GGUFError(f"'{path.name}' lacks head count, embedding length or context length",
                        "re-convert it with a current llama.cpp convert_hf_to_gguf.py")
    head_dim = int(get(Keys.Attention.KEY_LENGTH) or hidden // heads)
    n_rot = int(get(Keys.Rope.DIMENSION_COUNT) or head_dim)
    if not 0 < n_rot <= head_dim:  # said in the GGUF's own terms, not as a config.json partial_rotary_factor
        raise GGUFError(f"'{path.name}' has {arch}.rope.dimension_count {n_rot:,}, outside 1 to the head size "
                        f"{head_dim:,}", "re-convert it with a current llama.cpp convert_hf_to_gguf.py")
    cfg: dict[str, Any] = {
        "model_type": model_type,
        "architectures": [f"gguf:{arch}"],
        "hidden_size": int(hidden),
        "num_attention_heads": int(heads),
        "num_key_value_heads": int(get(Keys.Attention.HEAD_COUNT_KV) or heads),
        "head_dim": head_dim,
        "max_position_embeddings": int(get(Keys.LLM.CONTEXT_LENGTH)),
        "rope_theta": float(get(Keys.Rope.FREQ_BASE, 10000.0)),
        "ropectl": _record(meta, layout, arch),
    }
    if n_rot != head_dim:
        cfg["partial_rotary_factor"] = n_rot / head_dim
    scaling = gguf_scaling(meta, arch)
    if scaling:
        cfg["rope_scaling"] = scaling
    return cfg


def _record(meta: Mapping[str, Any], layout: str, arch: str) -> dict[str, Any]:
    from ropectl.schema.record import BaseRope, Record

    base = None
    if meta.get(BASE_THETA_KEY) is not None:
        base = BaseRope(float(meta[BASE_THETA_KEY]), None, int(meta.get(BASE_CONTEXT_KEY) or 0) or None)
    method = str(meta[METHOD_KEY]) if meta.get(METHOD_KEY) else None
    return Record(base, method, layout, f"GGUF arch '{arch}'").to_json()


def gguf_scaling(meta: Mapping[str, Any], arch: str) -> dict[str, Any] | None:
    from gguf import Keys

    def get(key: str) -> Any:
        return meta.get(key.format(arch=arch))

    prefix = Keys.Rope.SCALING_TYPE.format(arch=arch).removesuffix("type")  # "{arch}.rope.scaling."
    kind = get(Keys.Rope.SCALING_TYPE)
    factor = get(Keys.Rope.SCALING_FACTOR)
    factor = get(LEGACY_SCALE_LINEAR) if factor is None else factor
    owner = gguf_owner(kind)  # llama.cpp treats a factor without a type as linear (the ``gguf_untyped`` method)
    if (owner is not None and owner.unscaled) or (kind is None and factor in (None, 1.0)):
        return None
    rope_type = str(kind or (owner.gguf_type if owner else kind))
    out: dict[str, Any] = {"rope_type": rope_type, "type": rope_type}
    if factor is not None:
        out["factor"] = float(factor)
    if get(Keys.Rope.SCALING_ORIG_CTX_LEN):
        out["original_max_position_embeddings"] = int(get(Keys.Rope.SCALING_ORIG_CTX_LEN))
    for key, name in _SCALING_KEYS.items():
        if get(getattr(Keys.Rope, key)) is not None:
            out[name] = float(get(getattr(Keys.Rope, key)))
    if owner is not None and owner.gguf_read is not None:  # the method's own keys (yarn's attn_factor)
        out = owner.gguf_read(out, lambda key: meta.get(prefix + key))
    return out
