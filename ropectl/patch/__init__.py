"""``ropectl patch``: rewrite a checkpoint's RoPE scaling so every engine reads it the same way.

Applying a method to a config dict, the one code path ``patch`` and the evaluation commands share, lives below
both in ``ropectl.schema.apply`` (``apply_to_config``, ``plan_config``); it is re-exported here for callers of
the patch API.
"""

from ropectl.patch.core import patch_checkpoint
from ropectl.patch.spec import MethodChoice, PatchSpec, build_choice, method_spec
from ropectl.patch.summary import PatchResult
from ropectl.schema.apply import ConfigPlan, apply_to_config, plan_config

__all__ = ["ConfigPlan", "MethodChoice", "PatchResult", "PatchSpec", "apply_to_config", "build_choice",
           "method_spec", "patch_checkpoint", "plan_config"]
