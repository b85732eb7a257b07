"""The one reviewed table of refusals the model sweep accepts (tests/schema/test_model_sweep.py).

Key: (model_type, what), where ``what`` is "inspect" or a method name, and model_type "*" means every type.
Value: why refusing is right. An entry that stops refusing, or names a type transformers no longer has,
fails the sweep, so this table always says exactly what ropectl refuses today. Types for which transformers
ships a config class but no modeling code (remote code) are refused for every method and need no entry:
the sweep checks that from the installed package itself.
"""

from __future__ import annotations

_FACTOR_METHODS = ("linear", "ntk", "dynamic", "yarn", "llama3", "longrope")
_NON_PROPE = ("linear", "dynamic", "yarn", "llama3", "longrope")

_AXIAL = "vision-only: rope type 'axial' rotates image patch rows/columns, no text context to scale"
_NOT_TEXT = "not a text decoder: its RoPE does not index a text context"
_PROPE = "p-RoPE model: this method would rotate fewer dims than its attention expects (use proportional or ntk)"
_ODD_YARN = "odd rotary dim: transformers' yarn ramp has one value less than the frequencies and crashes"
_PHI3 = "transformers' Phi-3 family config accepts only default and longrope"

ALLOWED: dict[tuple[str, str], str] = {
    ("*", "proportional"): "proportional keeps a p-RoPE layout; every other model is refused (use linear)",
    **{(t, "inspect"): _AXIAL for t in (
        "cohere_compass_vision", "dots3_note_vision_encoder", "edgetam_video", "ernie4_5_vl_moe_vision",
        "exaone4_5_vision", "gemma4_vision", "glm4v_moe_vision", "glm4v_vision", "glm5_next_vision",
        "glm_ocr_vision", "inkling2_vision", "kimi_k25_vision", "lfm3_vl_vision", "minimax_m3_vl_vision",
        "mlcd_vision_model", "muse_glimmer_vision", "muse_spark_vision", "paddleocr_vl_vision", "pixtral",
        "qwen2_5_omni_vision_encoder", "qwen2_5_vl_vision", "qwen2_vl_vision", "qwen3_5_moe_vision",
        "qwen3_5_vision", "qwen3_omni_moe_vision_encoder", "qwen3_vl_moe_vision", "qwen3_vl_vision",
        "qwen4_exp_vision", "sam2_video", "sam3_tracker_video", "sam3_vit_model", "step3p5_vision",
        "video_llama_3_vision",
    )},
    **{(t, "inspect"): _NOT_TEXT for t in (
        "dots3_note_audio_encoder", "efficientloftr", "eomt_dinov3", "llama4_vision_model", "moonshine",
        "pe_audio_encoder", "pe_audio_video_encoder", "pocket_tts_audio_tokenizer",
        "pocket_tts_audio_tokenizer_decoder", "pocket_tts_audio_tokenizer_encoder",
    )},
    ("blt", "inspect"): "composite byte-level model: its RoPE lives in the blt_* sub-configs, swept on their own",
    **{(t, m): _PROPE for t in ("gemma4_text", "gemma4_unified_text", "lfm3", "diffusion_gemma_text")
       for m in _NON_PROPE},
    **{(t, m): _PHI3 for t in ("phi3", "phi4_multimodal") for m in ("linear", "dynamic", "yarn", "llama3")},
    **{(t, "yarn"): _ODD_YARN for t in ("glm4_moe", "glm4v_moe_text", "qwen3_omni_moe_text")},
    **{(t, m): "transformers' ERNIE-4.5-VL accepts only its pre-permuted default RoPE"
       for t in ("ernie4_5_vl_moe_text",) for m in ("none", *_FACTOR_METHODS)},
    ("ernie4_5_vl_moe_text", "as-is"): "its pre-permuted default RoPE is not the one ropectl reads from the config, "
    "so the checkpoint as it is cannot be verified (nor its serving lines printed)",
    **{(t, m): "transformers' Cosmos3 Edge accepts only its default RoPE"
       for t in ("cosmos3_edge_text",) for m in ("none", *_FACTOR_METHODS)},
    **{("deepseek_v4", m): "its 'compress' RoPE is built outside the rotary module: a patch cannot be verified"
       for m in ("none", "as-is", *_FACTOR_METHODS)},
    ("mistral4", "none"): "transformers' Mistral 4 default RoPE ignores partial_rotary_factor (whole head rotated)",
    ("mistral4", "ntk"): "ntk writes the default type: same Mistral 4 problem as 'none'",
    ("dots3_note_text", "longrope"): "transformers' longrope reads one global head_dim; this model has per-layer ones",
    ("embedding_gemma2_text", "longrope"): "transformers' longrope reads one global head_dim; per-layer here",
    # found by patch's forward check (a tiny copy run through transformers' forward), which the sweep runs with yarn
    ("molmo2_text", "yarn"): "Molmo2 scales only its rope_scaling_layers and runs the others on an unscaled rotary "
                             "embedding, which one rope section cannot describe: the forward check refuses it",
    **{("recurrent_gemma", m): "config names no trained context: pass original_max_position_embeddings=N "
       "(and transformers builds only its default type: ntk is the one method that applies)" for m in _FACTOR_METHODS},
}


def allowed_reason(model_type: str, what: str) -> str | None:
    return ALLOWED.get((model_type, what)) or ALLOWED.get(("*", what))
