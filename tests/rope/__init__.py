"""RoPE math, the method registry and the presets."""
