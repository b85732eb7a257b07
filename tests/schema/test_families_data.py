"""Per-family tables that mirror transformers' config classes, checked against the installed transformers."""

from __future__ import annotations

from ropectl.families import TEXT_SUBCONFIG_TYPES


def test_text_subconfig_types_are_transformers_composites() -> None:
    """Exactly the config classes with a text_config sub-config (vLLM overrides must be nested for these)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    found = set()
    for model_type in CONFIG_MAPPING.keys():
        try:
            cls = CONFIG_MAPPING[model_type]
        except Exception:  # a config class whose optional dependency is missing
            continue
        if "text_config" in (getattr(cls, "sub_configs", None) or {}):
            found.add(model_type)
    assert found == TEXT_SUBCONFIG_TYPES
    assert "llama" not in found and {"qwen2_5_vl", "gemma3", "mistral3", "llama4", "qwen3_5"} <= found  # controls
