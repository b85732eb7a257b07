"""ropectl: inspect, patch, convert and evaluate RoPE scaling of Hugging Face checkpoints."""

__version__ = "0.1.0"
