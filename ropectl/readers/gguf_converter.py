"""What llama.cpp's converter (convert_hf_to_gguf.py) carries of a checkpoint's own scaling into the GGUF it writes,
by the config's ``architectures``: the llama.cpp reader's refusals and the serving line's notes both say it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ropectl.errors import MethodError
from ropectl.rope.params import RopeParams

# What convert_hf_to_gguf.py (the llama.cpp bundled with llama-cpp-python 0.3.36, conversion/*.py) carries into
# the GGUF, by the config's ``architectures``: llama3 only where the converter class bakes a rope_freqs tensor, and
# LongRoPE factors only where it writes rope_factors_long/short; elsewhere the GGUF holds unscaled RoPE.
LLAMA3_ARCHITECTURES = frozenset({
    "AfmoeForCausalLM", "ApertusForCausalLM", "ArceeForCausalLM", "BambaForCausalLM", "CogVLMForCausalLM",
    "DeciLMForCausalLM", "Exaone4ForCausalLM", "ExaoneForCausalLM", "ExaoneMoEForCausalLM", "ExaoneMoeForCausalLM",
    "GraniteForCausalLM", "GraniteMoeForCausalLM", "GraniteMoeHybridForCausalLM", "GraniteMoeSharedForCausalLM",
    "IQuestCoderForCausalLM", "JanusForConditionalGeneration", "LLaMAForCausalLM", "Llama4ForCausalLM",
    "Llama4ForConditionalGeneration", "LlamaForCausalLM", "LlamaModel", "LlavaForConditionalGeneration",
    "MistralForCausalLM", "MixtralForCausalLM", "NemotronHForCausalLM", "SmolLM3ForCausalLM",
    "VLlama3ForCausalLM", "VoxtralForConditionalGeneration",
})
LONGROPE_ARCHITECTURES = frozenset({"MiniCPM3ForCausalLM", "MiniCPMForCausalLM", "Phi3ForCausalLM",
                                    "Phi4ForCausalLMV", "PhiMoEForCausalLM"})
_CARRIED = {"llama3": (LLAMA3_ARCHITECTURES, "a rope_freqs tensor"),
            "longrope": (LONGROPE_ARCHITECTURES, "rope_factors_long/short tensors")}
CONVERTER_CARRIES = frozenset(_CARRIED)  # rope types the converter writes as tensors (for some architectures)
# llama.cpp picks one LongRoPE list per context, not per sequence length (src/llama-model.cpp get_rope_factors, read
# in the llama.cpp vendored by llama-cpp-python 0.3.36): the long factors whenever n_ctx_seq > n_ctx_orig_yarn.
LONG_FACTORS_PER_CONTEXT = ("llama.cpp uses the long factors at every position once -c exceeds the original {original} "
                            "(get_rope_factors picks one list per context), while transformers uses the short ones up "
                            "to {original} tokens: shorter prompts get other RoPE; -c {original} or less serves the "
                            "short factors")


def converter_drops(rope_type: str, architecture: str) -> str | None:
    """Why convert_hf_to_gguf.py writes no ``rope_type`` scaling for ``architecture`` (llama.cpp then runs
    unscaled RoPE), or None where it carries it."""
    carried = _CARRIED.get(rope_type)
    if carried is None or architecture in carried[0]:
        return None
    return drop_note(rope_type)


def drop_note(rope_type: str) -> str:
    return (f"llama.cpp's converter (convert_hf_to_gguf.py) writes {rope_type} scaling ({_CARRIED[rope_type][1]}) "
            "only for Llama-family and a few other architectures: for this one the GGUF runs unscaled RoPE")


def converted_scaling(rope: RopeParams, config: Mapping[str, Any]) -> str | None:
    """What carries a checkpoint's own ``rope`` into the GGUF its converter writes, where the scaling is one no flag
    sets (llama3, longrope); None for the other rope types. Refused where the converter drops it."""
    from ropectl.schema.layers import text_config

    carried = _CARRIED.get(rope.rope_type)
    if carried is None:
        return None
    architecture = next(iter(config.get("architectures") or text_config(config).get("architectures") or [""]), "")
    dropped = converter_drops(rope.rope_type, architecture)
    if dropped:
        raise MethodError(f"this checkpoint's own {rope.rope_type} scaling does not reach llama.cpp: {dropped}",
                          "serve it with vLLM or SGLang, or patch it to yarn (which every architecture converts)")
    return carried[1]


def converted_notes(rope: RopeParams, target: int) -> list[str]:
    """What the line that serves a converted checkpoint's own scaling at ``target`` computes otherwise."""
    original = rope.original_max_position_embeddings
    if rope.rope_type in _CARRIED and rope.scaling.get("long_factor") and original and target > original:
        return [LONG_FACTORS_PER_CONTEXT.format(original=original)]
    return []
