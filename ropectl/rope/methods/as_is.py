"""as-is: the checkpoint unchanged, with the RoPE its config ships (a fine-tune's yarn x2, Llama 3.1's llama3 x8, or
none at all). It builds nothing: ``keeps_checkpoint`` tells the config planner (``schema.apply``) to leave the config
as it is, so every command that takes ``-m`` can name the checkpoint itself beside ``none``, the unscaled base."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ropectl.errors import MethodError
from ropectl.rope.methods.registry import Method
from ropectl.rope.params import RopeParams


def build(base: RopeParams, factor: float, o: Mapping[str, Any]) -> RopeParams:
    # Only reached by a caller that scales a bare RoPE without a config (there is no checkpoint to keep).
    raise MethodError("as-is keeps a checkpoint's own RoPE and builds none from a base",
                      "use it on a model (patch, eval-ppl, eval-tasks, recommend), or name a scaling method")


METHOD = Method("as-is", "the checkpoint unchanged: the RoPE its config ships (scaled or not)", (), build, "",
                uses_factor=False, max_position_rule="kept as the checkpoint has it", keeps_checkpoint=True,
                inference_only="as-is names the checkpoint's own RoPE, not a scaling to train for; pass the method "
                               "and factor to fine-tune with")
