"""GGUF architectures: how llama.cpp names each model family, and the q/k layout its tensors are in."""

# llama.cpp architecture -> (HF model_type, q/k layout of the tensors in the file).
# llama.cpp permutes q/k into the interleaved ("NORM") layout only for the llama family.
GGUF_ARCHS: dict[str, tuple[str, str]] = {
    "llama": ("llama", "interleaved"),
    "mistral": ("mistral", "interleaved"),
    "granite": ("granite", "interleaved"),
    "qwen2": ("qwen2", "half-split"),
    "qwen3": ("qwen3", "half-split"),
    "qwen2moe": ("qwen2_moe", "half-split"),
    "phi3": ("phi3", "half-split"),
    "gemma": ("gemma", "half-split"),
    "gemma2": ("gemma2", "half-split"),
    "gemma3": ("gemma3_text", "half-split"),
    "stablelm": ("stablelm", "half-split"),
    "gptneox": ("gpt_neox", "half-split"),
    "falcon": ("falcon", "half-split"),
    "starcoder2": ("starcoder2", "half-split"),
}
