"""``ropectl finetune``: recover long-context quality after patching (PoSE or full-length, full or LoRA).

``spec`` (the frozen run spec), ``plan`` (the patched config through ``schema.apply`` and the batch layout), ``data``
(BOS/EOS documents, held-out split, packed spans), ``positions`` (PoSE position ids), ``loss`` (the chunked loss
recomputed in backward), ``build`` (the patched model, verified; LoRA), ``monitor`` (progress, log, evaluation),
``runs`` (the run folder, Ctrl-C and resume), ``train`` (transformers' Trainer), ``output`` (the written
checkpoint). Heavy libraries are imported inside functions.
"""
