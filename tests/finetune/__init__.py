"""finetune: the written checkpoint (output), training and the command."""
