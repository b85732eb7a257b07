"""``ropectl finetune``: recover long-context quality after patching (PoSE or full-length, full or LoRA), and write
the checkpoint with its patched RoPE (``ropectl.finetune.output``)."""
