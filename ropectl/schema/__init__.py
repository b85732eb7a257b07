"""Config schema: reading (``read``) and writing (``write``) RoPE settings for transformers 4.x and 5.x."""

from ropectl.schema.layers import text_config
from ropectl.schema.read import ModelRope, check_uses_rope, read_model_rope

__all__ = ["ModelRope", "check_uses_rope", "read_model_rope", "text_config"]
