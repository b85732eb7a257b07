"""patch: configs, emitted engine flags, GGUF output, per-layer RoPE, re-extension, errors."""
