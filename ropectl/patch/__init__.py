"""``ropectl patch``: rewrite a checkpoint's RoPE scaling so every engine reads it the same way."""

from ropectl.patch.config import ConfigPlan, apply_to_config, plan_config

__all__ = ["ConfigPlan", "apply_to_config", "plan_config"]
