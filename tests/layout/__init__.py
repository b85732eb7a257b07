"""convert-layout: architectures, permutations, streaming I/O, GGUF, MLA, errors."""
