"""Per-family facts about where a config.json keeps what RoPE depends on, in one place.

Each entry mirrors what transformers' config class for that model type does (its ``attribute_map``,
``__post_init__`` or rotary class), so that ``read_model_rope`` reports what transformers builds.
"""

from __future__ import annotations

from typing import Any

# transformers' attribute_map entries for the keys RoPE depends on: canonical key -> the key config.json uses.
KEY_ALIASES: dict[str, dict[str, str]] = {
    "jetmoe": {"head_dim": "kv_channels"},
    "zamba2": {"head_dim": "attention_head_dim", "layer_types": "layers_block_type"},
    "glm4_moe_lite": {"head_dim": "qk_rope_head_dim"},
    "dbrx": {"num_attention_heads": "n_heads", "hidden_size": "d_model", "max_position_embeddings": "max_seq_len"},
    "bailing_hybrid": {"max_position_embeddings": "model_max_length"},
    "bamba": {"layer_types": "layers_block_type"},
    "falcon_h1": {"layer_types": "layers_block_type"},
    "recurrent_gemma": {"layer_types": "layers_block_type"},
}
# Config-class defaults that published config.json files rely on (gemma-3-4b-it's text_config names no heads).
CLASS_DEFAULTS: dict[str, dict[str, object]] = {
    "gemma3_text": {"hidden_size": 2304, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                    "max_position_embeddings": 131072},
}

# Keys kept in a sub-dict: canonical key -> (sub-dict, key). DBRX's kv heads live in attn_config.
NESTED_ALIASES: dict[str, dict[str, tuple[str, str]]] = {
    "dbrx": {"num_key_value_heads": ("attn_config", "kv_n_heads")},
}

# Multi-head latent attention (DeepSeek-V2/V3, Kimi K2, ...): the config class sets head_dim to
# qk_rope_head_dim, the only part of each q/k head that is rotated.
MLA_ROPE_HEAD_DIM = frozenset({
    "axk1", "axk2", "bailing_hybrid", "deepseek_v2", "deepseek_v3", "deepseek_v32", "glm5_next", "glm_moe_dsa",
    "hy_v4", "kimi_k2", "kimi_linear", "minicpm3", "mistral_large4", "mistral_large4_text", "youtu",
})

# Rope types that rotate image patches in two dimensions: nothing to do with a text context length.
VISION_ROPE_TYPES = frozenset({"axial"})

# Model types whose RoPE belongs to a vision or audio encoder (or a non-text model), not to a text decoder.
NOT_TEXT_TYPES: dict[str, str] = {
    "dots3_note_audio_encoder": "an audio encoder",
    "efficientloftr": "an image feature matcher",
    "eomt_dinov3": "a vision transformer with 2-D patch positions",
    "llama4_vision_model": "a vision encoder",
    "pe_audio_encoder": "an audio encoder",
    "pe_audio_video_encoder": "an audio-video encoder",
    "pocket_tts_audio_tokenizer": "an audio tokenizer",
    "pocket_tts_audio_tokenizer_decoder": "an audio tokenizer",
    "pocket_tts_audio_tokenizer_encoder": "an audio tokenizer",
    "moonshine": "a speech encoder-decoder",
    "blt": "a byte-level composite whose RoPE lives in its sub-configs",
}

# Per-layer rope sections: the label that holds the global (long-context) attention, in order of preference.
MAIN_LAYER_LABELS = ("full_attention", "global_attention", "main", "hybrid", "indexed_attention")

# transformers 5 merges a flat legacy rope_scaling into the nested full_attention section for these only;
# any other per-layer model must get the nested form.
LEGACY_NESTED_MERGE = frozenset({"gemma3", "gemma3_text"})

# Config classes that, given no ``per_layer_config``, build one from ``global_head_dim`` (this default when absent):
# the full-attention layers' head dim (transformers' Gemma4TextConfig.__post_init__ and the classes copied from it).
GLOBAL_HEAD_DIM_DEFAULT = {"gemma4_text": 512, "gemma4_unified_text": 512, "diffusion_gemma_text": 512,
                           "embedding_gemma2_text": 512}

# Config classes that keep a top-level ``rotary_dim`` that their rotary class never reads.
ROTARY_DIM_IGNORED = frozenset({"minimax_m3_vl", "minimax_m3_vl_text"})
# Multimodal RoPE whose default inverse frequencies transformers stores pre-permuted (ERNIE-4.5-VL
# interleaves the height/width sections): another ordering of the same frequencies.
PRE_ROTATED_MROPE = frozenset({"ernie4_5_vl_moe_text", "ernie4_5_vl_moe"})
# PhiMoE's rotary forward replaces the attention factor by short_mscale / long_mscale for any scaled type,
# and its config rejects a scaled section without both numbers.
MSCALE_TYPES = frozenset({"phimoe"})

# Rope types that transformers cannot build for these model types, with the reason (None: every type).
_ERNIE_VL = "transformers' ERNIE-4.5-VL accepts only the default rope type and stores its frequencies pre-permuted " \
            "for its 3-D RoPE, so ropectl cannot write one it builds the same way"
_PER_LAYER_HEADS = "transformers' longrope reads one global head_dim, which this per-layer-head model does not have"
PATCH_REFUSED: dict[str, tuple[tuple[str, ...] | None, str]] = {
    "ernie4_5_vl_moe_text": (None, _ERNIE_VL),
    "ernie4_5_vl_moe": (None, _ERNIE_VL),
    "cosmos3_edge_text": (None, "transformers' Cosmos3 Edge accepts only its default RoPE"),
    "cosmos3_edge": (None, "transformers' Cosmos3 Edge accepts only its default RoPE"),
    "mistral4": (("default",), "transformers' Mistral 4 default RoPE ignores partial_rotary_factor and would rotate "
                               "the whole 128-dim head instead of the 64 rope dims"),
    "dots3_note_text": (("longrope",), _PER_LAYER_HEADS),
    "recurrent_gemma": (("linear", "yarn", "dynamic", "llama3", "longrope"),
                        "transformers' RecurrentGemma builds only the default rope type (ntk, a base change, works)"),
    "deepseek_v4": (None, "DeepSeek-V4's compressed-attention RoPE ('compress') is built outside the rotary module "
                          "transformers exposes, so ropectl cannot verify a patch of it"),
    "embedding_gemma2_text": (("longrope",), _PER_LAYER_HEADS),
}

# Model types whose attention multiplies its softmax scale by mscale(factor, mscale_all_dim)^2 when the rope type is
# scaled and mscale_all_dim is set (transformers' yarn_apply_mscale in their modeling files; vLLM's deepseek_v2.py
# does the same): DeepSeek-V3's x40 gives x1.874 on top of 1/sqrt(d).
SOFTMAX_MSCALE_TYPES = frozenset({
    "axk1", "axk2", "bailing_hybrid", "deepseek_v2", "deepseek_v3", "deepseek_v32", "glm4_moe_lite", "glm_moe_dsa",
    "hy_v4", "hy_v4_vl", "kimi_k2", "longcat_flash", "minicpm3", "mistral4", "mistral_large4", "youtu",
})

# Model types that publish linear scaling with max_position_embeddings already scaled (Gemma 3: linear x8 and
# 131072, trained 16384 on its global layers); vLLM reads them so too. For any other linear config without a ropectl
# record, max_position_embeddings is taken as the trained length (vLLM multiplies it by the factor).
LINEAR_SCALED_MAX_POSITIONS = frozenset({"gemma3", "gemma3_text"})


def shipped_original(model_type: str, rope_type: str, factor: float | None, max_pos: int | None) -> int | None:
    """The pretraining length of a published linear scaling whose max_position_embeddings is already scaled."""
    if rope_type != "linear" or model_type not in LINEAR_SCALED_MAX_POSITIONS or not factor or not max_pos:
        return None
    return int(round(max_pos / factor))


# Keys of a rope section that belong to a scaling (transformers' RopeParameters, PhiMoE's mscales, and every method's
# options, which ``schema.apply`` adds): a patch writes them from its method. Any other key of a shipped section
# describes the model, not the scaling, and every patch carries it unchanged (Qwen2-VL / Qwen3-VL's mrope_section
# splits the frequencies into temporal / height / width sections; Ministral 3's llama_4_scaling_beta is read by its
# attention): never dropped.
SCALING_ROPE_KEYS = frozenset({
    "factor", "original_max_position_embeddings", "attention_factor", "beta_fast", "beta_slow", "mscale",
    "mscale_all_dim", "truncate", "short_factor", "long_factor", "low_freq_factor", "high_freq_factor", "short_mscale",
    "long_mscale", "partial_rotary_factor",
})
# Carried keys that the model's attention reads together with a scaling key (transformers 5.24's Ministral3Attention
# multiplies the queries by 1 + llama_4_scaling_beta x ln(1 + floor(position / original_max_position_embeddings)),
# both from rope_parameters, and raises TypeError without either): the shipped value of the second stays wherever the
# new rope type writes none (ntk, linear), so the query temperature is the model's own.
ATTENTION_ROPE_KEYS: dict[str, tuple[str, ...]] = {"llama_4_scaling_beta": ("original_max_position_embeddings",)}
# Carried keys patch need not name (the multimodal sections every Qwen-VL patch keeps).
STRUCTURAL_ROPE_KEYS = frozenset({"mrope_section", "mrope_interleaved"})

# Model types whose transformers config class keeps the language model in a `text_config` sub-config (read from
# transformers 5.24's config classes; tests/schema/test_families_data.py checks it against the installed one). An engine that
# applies overrides to the top-level config (vLLM's --hf-overrides) must nest them under text_config for these.
TEXT_SUBCONFIG_TYPES = frozenset({
    "aimv2", "align", "altclip", "apertus1p5", "aria", "audioflamingo3", "aya_vision", "blip", "blip-2",
    "bridgetower", "chinese_clip", "clap", "clip", "clipseg", "clvp", "cohere2_vision", "cohere_compass",
    "cosmos3_edge", "cosmos3_omni", "deepseek_ocr2", "deepseek_vl", "deepseek_vl_hybrid", "diffusion_gemma",
    "dots3_note", "embedding_gemma2", "emu3", "ernie4_5_vl_moe", "exaone4_5", "fast_vlm", "flava", "florence2",
    "fun_asr_nano", "fuyu", "gemma3", "gemma3n", "gemma4", "gemma4_assistant", "gemma4_unified",
    "gemma4_unified_assistant", "glm46v", "glm4v", "glm4v_moe", "glm5_next", "glm_image", "glm_ocr", "glmasr",
    "glmga", "got_ocr2", "granite4_vision", "granite_docling", "granite_speech", "granite_speech_plus",
    "grounding-dino", "groupvit", "hunyuan_vl", "hy_v4_vl", "hyperclovax_vision_v2", "idefics2", "idefics3",
    "inkling2", "inkling2_loop", "inkling_mm_model", "instructblip", "instructblipvideo", "internvl", "janus",
    "jev", "kimi_k25", "kosmos-2", "kosmos-2.5", "lfm2_vl", "lfm3_vl", "lighton_ocr", "llama4", "llava",
    "llava_next", "llava_next_video", "llava_onevision", "metaclip_2", "minicpm_ocr", "minicpmv4_6", "minicpmv4_7",
    "minimax_m3_vl", "mistral3", "mistral_large4", "mllama", "mm-grounding-dino", "modernvbert", "molmo2",
    "moss_transcribe_diarize", "muse_glimmer", "muse_spark", "musicflamingo", "nemo_speechlm", "nemotron_h_omni",
    "omdet-turbo", "omniasr", "ovis2", "owlv2", "owlvit", "paddleocr_vl", "paligemma", "pe_audio", "pe_audio_video",
    "pe_video", "perception_lm", "pix2struct", "pp_chart2table", "pp_formulanet", "qianfan_ocr",
    "qwen2_5_omni_thinker", "qwen2_5_vl", "qwen2_audio", "qwen2_vl", "qwen3_5", "qwen3_5_moe", "qwen3_asr",
    "qwen3_omni_moe_thinker", "qwen3_vl", "qwen3_vl_moe", "qwen4_exp", "sam3", "sam3_lite_text", "shieldgemma2",
    "siglip", "siglip2", "smolvlm", "step3p7", "t5gemma2_encoder", "tipsv2", "ultravbert", "unlimited_ocr",
    "vibevoice", "vibevoice_asr", "video_llama_3", "video_llava", "videoprism", "vipllava",
    "vision-text-dual-encoder", "voxtral", "voxtral_realtime", "xclip",
})


# Config classes whose default RoPE is scaled: a config.json without rope keys gets it (GptOssConfig: yarn x32 at
# theta 150000; transformers 4.55 has no original_max_position_embeddings in it, so yarn takes max_position_embeddings).
CLASS_DEFAULT_ROPE: dict[str, dict[str, Any]] = {
    "gpt_oss": {"rope_theta": 150000.0, "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0,
                                                         "beta_slow": 1.0, "truncate": False,
                                                         "original_max_position_embeddings": 4096}},
}
V4_CLASS_DEFAULT_DROPS = ("original_max_position_embeddings",)


def class_default_rope(model_type: str, with_original: bool = True) -> dict[str, Any]:
    """The rope keys ``model_type``'s config class fills in when config.json has none (empty: none)."""
    default = CLASS_DEFAULT_ROPE.get(model_type)
    if default is None:
        return {}
    scaling = {k: v for k, v in default["rope_scaling"].items() if with_original or k not in V4_CLASS_DEFAULT_DROPS}
    return {"rope_theta": default["rope_theta"], "rope_scaling": scaling}


# --- Which model types use RoPE, and the defaults their classes apply ---
# Model types whose position encoding is learned, absolute, relative or ALiBi: never RoPE.
NO_ROPE_TYPES = frozenset({
    "gpt2", "gpt_bigcode", "bert", "roberta", "xlm-roberta", "distilbert", "albert", "electra", "deberta",
    "deberta-v2", "t5", "mt5", "bart", "mbart", "opt", "bloom", "mpt", "whisper", "vit", "clip", "biogpt",
    "gpt_neo", "xglm", "ctrl", "transfo-xl", "longformer", "bigbird_pegasus", "pegasus", "marian",
})
# Defaults the model classes use when config.json names no base.
DEFAULT_THETA = {"mixtral": 1e6, "gemma3_text": 1e6, "gemma3": 1e6, "qwen3_moe": 1e6, "ernie4_5": 5e5}
DEFAULT_PARTIAL = {"gpt_neox": 0.25, "stablelm": 0.25, "phi": 0.5, "persimmon": 0.5, "glm": 0.5, "glm4": 0.5}
# Architectures known to use RoPE even when config.json spells no RoPE key (they rely on defaults).
ROPE_MODEL_TYPES = frozenset({
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2", "gemma3",
    "gemma3_text", "phi", "phi3", "gpt_neox", "gptj", "stablelm", "falcon", "olmo", "olmo2", "starcoder2",
    "cohere", "cohere2", "granite", "internlm2", "deepseek_v2", "deepseek_v3", "persimmon", "smollm3",
    "codegen", "glm", "glm4", "helium", "exaone", "ernie4_5", "mistral4",
})

# --- Strict config classes (what transformers' per-model config classes demand beyond the generic checks) ---
GEMMA3 = frozenset({"gemma3", "gemma3_text"})
# Model types that no transformers 4.x release knows (4.57.6, the last 4.x, has no qwen3_5 module; 5.19 and 5.24 do).
V5_ONLY_TYPES = frozenset({"qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"})
PHI3 = frozenset({"phi3"})
# Config classes that demand exactly these rope_scaling keys in some supported transformers version.
EXACT_V4_KEYS: dict[str, frozenset[str]] = {
    "phi3": frozenset({"type", "short_factor", "long_factor"}),
    "gpt_neox": frozenset({"type", "factor"}),
}
# Config classes that keep head_dim None when config.json has none, so dynamic/yarn/longrope init raises
# (Mistral in 4.x; these in 5.x, e.g. Mixtral-8x7B's config.json has no head_dim).
HEAD_DIM_NONE_V4 = frozenset({"mistral"})
HEAD_DIM_NONE_V5 = frozenset({"mixtral", "ministral", "minimax", "hunyuan_v1_dense", "hunyuan_v1_moe",
                              "hunyuan_vl_text"})
# Config classes with a class-level default for the top-level original_max_position_embeddings, which transformers
# 5 lets override the dict's value: the key must always be written for them, never removed.
TOP_LEVEL_ORIGINAL = frozenset({"phi3", "phi4_multimodal"})
# Rope types each config class accepts where it is stricter than transformers' generic validation.
ALLOWED_TYPES = {"phi3": ("default", "longrope"), "phi4_multimodal": ("default", "longrope")}


def exact_v4_keys(model_type: str) -> frozenset[str] | None:
    """The exact rope_scaling keys some supported version's config class demands for ``model_type``."""
    return EXACT_V4_KEYS.get(model_type)


def needs_head_dim(model_type: str) -> bool:
    """Whether some supported version fails to build this model type's scaled RoPE without head_dim."""
    return model_type in HEAD_DIM_NONE_V4 | HEAD_DIM_NONE_V5
