"""``ropectl extend``: one command from a model to an extended checkpoint that proves itself.

``spec`` (the frozen request and the stage rules' constants), ``data`` (the documents split once into the stages'
folders), ``plan`` (two timed forwards, each stage's minutes and memory, fitted to --budget), ``stages`` (zero-shot
through recommend, search, finetune, ship through patch, acceptance through report, engines through verify: each a
call into its own package), ``state`` (what each finished stage left, reused on --resume), ``card`` (EXTENSION.md
and extension.json), ``gguf`` (llama.cpp's own converter for a fine-tuned GGUF source), ``run`` (the order).
"""
