"""The sweep over every RoPE model type of the installed transformers: the types, and their own rotary oracle.

The oracle is transformers itself: the rotary-embedding class that the model's text model instantiates,
built from the saved default config (no weights), read back through ``AutoConfig``.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

_ROTARY_CALL = re.compile(r"(\w+RotaryEmbedding)\(\s*(?:config|self\.config)")


@dataclass(frozen=True)
class SweepType:
    model_type: str  # the text config's model_type (what config.json says)
    config: Any  # the default text config instance


@cache
def rope_types() -> tuple[SweepType, ...]:
    """One entry per distinct text config model_type whose default config has RoPE parameters."""
    import transformers
    from transformers import CONFIG_MAPPING

    transformers.logging.set_verbosity_error()
    seen: dict[str, SweepType] = {}
    for name in sorted(CONFIG_MAPPING.keys()):
        try:
            config = CONFIG_MAPPING[name]()
            text = config.get_text_config()
        except Exception:  # composite configs that cannot be built with defaults (no text config to sweep)
            continue
        params = getattr(text, "rope_parameters", None)
        if not params or text.model_type in seen:
            continue
        seen[text.model_type] = SweepType(text.model_type, text)
    return tuple(seen.values())


def _model_class(model_type: str) -> type | None:
    from transformers.models.auto import modeling_auto

    for mapping in (modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, modeling_auto.MODEL_MAPPING_NAMES):
        name = mapping.get(model_type)
        if isinstance(name, (tuple, list)):
            name = name[0]
        if name:
            cls = getattr(importlib.import_module("transformers"), name, None)
            if cls is not None:
                return cls
    return None


@cache
def _instantiated_rotaries(module_name: str) -> tuple[str, ...]:
    """Rotary classes the module instantiates (``XRotaryEmbedding(config ...)``), read from its source text."""
    module = importlib.import_module(module_name)
    text = Path(module.__file__).read_text(encoding="utf-8")
    return tuple(dict.fromkeys(_ROTARY_CALL.findall(text)))


def _modeling_module(config: Any) -> Any:
    name = type(config).__module__.replace(".configuration_", ".modeling_")
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _common_prefix(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def rotary_class(config: Any) -> type | None:
    """The rotary-embedding class the model for ``config`` builds; None when none can be found."""
    cls = _model_class(config.model_type)
    module = importlib.import_module(cls.__module__) if cls is not None else _modeling_module(config)
    if module is None:
        return None
    names = list(_instantiated_rotaries(module.__name__)) or [n for n in dir(module) if n.endswith("RotaryEmbedding")]
    prefix = type(config).__name__.replace("Config", "")
    # A vision or audio tower's rotary class is never the text model's, unless the config itself is named so.
    names = [n for n in names if hasattr(module, n) and not any(w in n and w not in prefix for w in ("Vision", "Audio"))]
    if not names:
        return None
    return getattr(module, max(names, key=lambda n: (_common_prefix(n, prefix), -len(n))))


def transformers_ropes(folder: Path) -> dict[str, tuple[list[float], float]]:
    """{"main" or layer type: (inv_freq, attention_scaling)} from the model's own rotary class."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(folder))
    config = config.get_text_config()
    cls = rotary_class(config)
    if cls is None:
        raise LookupError(f"no rotary class found for {config.model_type}")
    rotary = cls(config)
    if hasattr(rotary, "inv_freq"):
        return {"main": (rotary.inv_freq.double().tolist(), float(rotary.attention_scaling))}
    out = {}
    for layer in sorted(set(getattr(config, "layer_types", None) or ())):
        if hasattr(rotary, f"{layer}_inv_freq"):
            out[layer] = (getattr(rotary, f"{layer}_inv_freq").double().tolist(),
                          float(getattr(rotary, f"{layer}_attention_scaling")))
    return out


def save_default(entry: SweepType, folder: Path) -> Path:
    entry.config.save_pretrained(str(folder))
    return folder


def sweep_type(model_type: str) -> SweepType:
    """One type's default text config, without building all of them."""
    from transformers import CONFIG_MAPPING

    text = CONFIG_MAPPING[model_type]().get_text_config()
    return SweepType(text.model_type, text)


def inspected_ropes(report: Any, layers: set[str]) -> dict[str, tuple[list[float], float]]:
    """An inspect report's RoPE, shaped like ``transformers_ropes`` (``layers`` is the oracle's labels: {"main"} for
    one rotary embedding)."""
    if layers == {"main"}:
        return {"main": (list(report.inv_freq), report.attention_factor)}
    return {k: (v["inv_freq"], v["attention_factor"]) for k, v in report.layers.items()}
