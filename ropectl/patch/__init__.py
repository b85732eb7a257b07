"""``ropectl patch``: rewrite a checkpoint's RoPE scaling so every engine reads it the same way.

``apply_to_config`` is the shared entry point for other commands (eval-ppl): it applies a method to a
config dict through exactly the code path ``patch`` uses.
"""

from ropectl.patch.config import ConfigPlan, apply_to_config, plan_config
from ropectl.patch.core import patch_checkpoint
from ropectl.patch.spec import MethodChoice, PatchSpec, build_choice, method_spec
from ropectl.patch.summary import PatchResult

__all__ = ["ConfigPlan", "MethodChoice", "PatchResult", "PatchSpec", "apply_to_config", "build_choice",
           "method_spec", "patch_checkpoint", "plan_config"]
