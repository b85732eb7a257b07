"""How each transformers version range reads a RoPE config: the entries, and ``predict`` that applies them.

Every entry was checked against the real version named in ``tested`` by the compat tier
(``make compat``, tests/compat/): a tiny model of each architecture, patched with every method and
schema, run forward, and the cos/sin it really used compared with ``predict``. Versions between two
tested ones are assumed to behave like the older one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ropectl import families
from ropectl.readers.base import (
    DICT,
    EXACT_KEYS,
    FAILS,
    FIXED_LONGROPE,
    FLAT_V5_UNSCALED,
    HEAD_DIM_IGNORED,
    IGNORES_SCALING,
    MAX_POS,
    NEEDS_HEAD_DIM,
    NEEDS_KEYS,
    NO_PARTIAL,
    ONLY_TYPES,
    PARTIAL_IGNORED,
    TOP,
    UNKNOWN_MODEL,
    Quirk,
    Reader,
    Reading,
    VersionRange,
)
from ropectl.rope.methods import rope_types_where

ENGINE = "transformers"
SERVE_AS, SERVED_BY_DEFAULT = "transformers", True  # recommend --serve-with
V4 = ("rope_theta", "rope_scaling")
V5 = ("rope_scaling", "rope_parameters", "rope_theta")  # rope_scaling wins when both are present
GEMMA3, PHI3 = families.GEMMA3, families.PHI3
PHI3_KEYS = families.EXACT_V4_KEYS["phi3"]
NO_LIMIT = "none enforced: longer prompts run (max_position_embeddings sizes only the initial cos/sin cache)"
SERVING_NOTES = {"dynamic": "dynamic keeps the trained frequencies up to max_position_embeddings and scales past it"}
TOP_FACTOR = "factor = max_position_embeddings / top-level original_max_position_embeddings when that is set"
DICT_FACTOR = "factor = max_position_embeddings / original_max_position_embeddings when the rope section has it"

_GEMMA3_NEW = Quirk(UNKNOWN_MODEL, "has no Gemma3 (added in 4.50)", GEMMA3, versions=VersionRange("4.0", "4.50"))
_QWEN3_5_NEW = Quirk(UNKNOWN_MODEL, "does not know the Qwen3.5 model types (added in 5.x)", families.V5_ONLY_TYPES,
                     versions=VersionRange("4.0", "5.0"),
                     fix="use a transformers 5.x release that has Qwen3.5 (5.19 and 5.24 do)")
_DEEPSEEK_V3_NEW = Quirk(UNKNOWN_MODEL, "has no DeepSeek-V3 (added in 4.51)", frozenset({"deepseek_v3"}),
                         versions=VersionRange("4.0", "4.51"))
_GPT_OSS_NEW = Quirk(UNKNOWN_MODEL, "has no gpt-oss (added in 4.55)", frozenset({"gpt_oss"}),
                     versions=VersionRange("4.0", "4.55"))
_PHI3_EXACT = Quirk(EXACT_KEYS, "Phi3Config requires rope_scaling to hold exactly type, short_factor and long_factor",
                    PHI3, keys=PHI3_KEYS, fix="write only those three keys and a top-level original_max_position_embeddings")
_PHI3_PARTIAL = Quirk(PARTIAL_IGNORED, "Phi-3 ignores partial_rotary_factor: every dimension rotates (fixed in 4.51)",
                      PHI3, fix="use transformers >= 4.51")
_GEMMA3_FLAT = Quirk(FLAT_V5_UNSCALED, "Gemma3 takes a flat rope_parameters as unscaled full attention", GEMMA3,
                     fix="nest rope_parameters by layer type ({full_attention, sliding_attention}): "
                         "`ropectl patch --replace-existing` writes that")
_MISTRAL_HEAD_DIM = Quirk(NEEDS_HEAD_DIM, "MistralConfig keeps head_dim None when config.json has none, and the "
                         "dynamic, yarn and longrope init functions then raise TypeError", families.HEAD_DIM_NONE_V4,
                         frozenset({"dynamic", "yarn", "longrope"}), fix="set head_dim in config.json (ropectl patch does)")

# Config classes whose head_dim defaults to None in 5.x (Mixtral-8x7B's config.json has no head_dim), while
# the dynamic, yarn and longrope init functions read config.head_dim without a fallback.
_V5_HEAD_DIM = Quirk(NEEDS_HEAD_DIM, "the config class keeps head_dim None when config.json has none, and the "
                     "dynamic, yarn and longrope init functions then raise TypeError",
                     families.HEAD_DIM_NONE_V5,
                     frozenset({"dynamic", "yarn", "longrope"}), fix="set head_dim in config.json (ropectl patch does)")


def _fixed_longrope(which: str, why: str) -> Quirk:
    # Phi-3 has its own rotary class in these versions, which switches lists by length.
    return Quirk(FIXED_LONGROPE, f"longrope uses {which} at every length ({why}; fixed in 4.51)",
                 rope_types=frozenset({"longrope"}), keys=frozenset({which}), exclude=PHI3, fix="use transformers >= 4.51")


_V4_LONGROPE = {"yarn": (MAX_POS,), "llama3": (DICT,), "longrope": (TOP, MAX_POS)}
_V4_LATE = {"yarn": (DICT, MAX_POS), "llama3": (DICT,), "longrope": (TOP, MAX_POS)}
_V5 = {t: (TOP, DICT, MAX_POS) for t in (rope_types_where(lambda m: m.needs_original))}

READERS: tuple[Reader, ...] = (
    Reader(ENGINE, VersionRange("4.43", "4.45"), V4, ("rope_parameters",), _V4_LONGROPE, {"longrope": TOP_FACTOR},
           NO_LIMIT, (
               Quirk(IGNORES_SCALING, "Mistral and Qwen2 build plain RoPE from rope_theta and ignore rope_scaling",
                     frozenset({"mistral", "qwen2"}), fix="use transformers >= 4.45 (Qwen2) / 4.48 (Mistral)"),
               Quirk(EXACT_KEYS, "GPTNeoXConfig requires rope_scaling to hold exactly type and factor",
                     frozenset({"gpt_neox"}), keys=families.EXACT_V4_KEYS["gpt_neox"]),
               Quirk(ONLY_TYPES, "GPTNeoXConfig accepts only linear and dynamic scaling", frozenset({"gpt_neox"}),
                     keys=frozenset({"linear", "dynamic"}), fix="use transformers >= 4.45"),
               Quirk(HEAD_DIM_IGNORED, "rotary width is hidden_size // num_attention_heads; head_dim is ignored"),
               Quirk(NEEDS_KEYS, "rope_config_validation raises TypeError on longrope without attention_factor",
                     rope_types=frozenset({"longrope"}), keys=frozenset({"attention_factor"}), exclude=PHI3,
                     fix="write attention_factor explicitly (ropectl patch does)"),
               _PHI3_EXACT, _PHI3_PARTIAL, _GEMMA3_NEW, _DEEPSEEK_V3_NEW, _GPT_OSS_NEW, _QWEN3_5_NEW,
               _fixed_longrope("long_factor", "chosen once, as max_position_embeddings > original"),
           ), ("4.43.4",), SERVING_NOTES),
    Reader(ENGINE, VersionRange("4.45", "4.48"), V4, ("rope_parameters",), _V4_LONGROPE, {"longrope": TOP_FACTOR},
           NO_LIMIT, (
               Quirk(IGNORES_SCALING, "Mistral builds plain RoPE from rope_theta and ignores rope_scaling",
                     frozenset({"mistral"}), fix="use transformers >= 4.48"),
               _PHI3_EXACT, _PHI3_PARTIAL, _GEMMA3_NEW, _DEEPSEEK_V3_NEW, _GPT_OSS_NEW, _QWEN3_5_NEW,
               _fixed_longrope("long_factor", "chosen once, as max_position_embeddings > original"),
           ), ("4.45.2",), SERVING_NOTES),
    Reader(ENGINE, VersionRange("4.48", "4.51"), V4, ("rope_parameters",), _V4_LONGROPE, {"longrope": TOP_FACTOR},
           NO_LIMIT, (
               _PHI3_EXACT, _GEMMA3_NEW, _DEEPSEEK_V3_NEW, _GPT_OSS_NEW, _QWEN3_5_NEW,
               Quirk(NO_PARTIAL, "Phi-3 with partial_rotary_factor < 1 fails in the forward pass (fixed in 4.51)", PHI3),
               _fixed_longrope("short_factor", "computed once, at load, with no sequence length"),
           ), ("4.48.3",), SERVING_NOTES),
    Reader(ENGINE, VersionRange("4.51", "4.55"), V4, ("rope_parameters",), _V4_LATE,
           {"yarn": DICT_FACTOR, "longrope": TOP_FACTOR}, NO_LIMIT, (_PHI3_EXACT, _GPT_OSS_NEW, _QWEN3_5_NEW),
           ("4.51.3",), SERVING_NOTES),
    Reader(ENGINE, VersionRange("4.55", "4.56"), V4, ("rope_parameters",), _V4_LATE,
           {"yarn": DICT_FACTOR, "longrope": TOP_FACTOR}, NO_LIMIT, (
               _PHI3_EXACT, _MISTRAL_HEAD_DIM, _QWEN3_5_NEW,
               Quirk(FAILS, "gpt-oss with llama3 raises AttributeError (GptOssConfig has no max_position_embeddings "
                     "attribute for it yet; fixed in 4.56)", frozenset({"gpt_oss"}), frozenset({"llama3"}),
                     fix="use transformers >= 4.56"),
           ), ("4.55.4",), SERVING_NOTES),
    Reader(ENGINE, VersionRange("4.56", "5.0"), V4, ("rope_parameters",), _V4_LATE, {"longrope": TOP_FACTOR},
           NO_LIMIT, (_PHI3_EXACT, _MISTRAL_HEAD_DIM, _QWEN3_5_NEW), ("4.57.6",), SERVING_NOTES),
    Reader(ENGINE, VersionRange("5.0", "5.9"), V5, (), _V5, {}, NO_LIMIT, (
        Quirk(FAILS, "Gemma3 with yarn raises KeyError 'original_max_position_embeddings' (fixed in 5.9)",
              GEMMA3, frozenset({"yarn"}), fix="use transformers >= 5.9"),
        _GEMMA3_FLAT, _V5_HEAD_DIM,
    ), ("5.0.0",), SERVING_NOTES),
    Reader(ENGINE, VersionRange("5.9"), V5, (), _V5, {}, NO_LIMIT, (
        _GEMMA3_FLAT, _V5_HEAD_DIM,
    ), ("5.24.0",), SERVING_NOTES),
)


def reader_for(version: str) -> Reader:
    for reader in READERS:
        if version in reader.versions:
            return reader
    from ropectl.errors import UsageError

    raise UsageError(f"transformers {version} is older than any reader ropectl knows", "use transformers >= 4.43")


def predict(reader: Reader, config: Mapping[str, Any], version: str | None = None) -> Reading:
    """What ``reader`` builds from ``config`` (a config.json dict), per layer type ("main" when flat)."""
    from ropectl.readers.features import features_of, with_features
    from ropectl.readers.interpret import interpret

    return with_features(interpret(reader, config, version), attention(features_of(config)))


def attention(f: Any) -> Any:
    """The attention features as transformers applies them: as the config says (its config classes define them),
    and no Dual Chunk Attention in any release (the key is never read)."""
    from ropectl.readers.features import FeatureReading, as_configured, no_dca

    notes = ([no_dca(ENGINE, f)] if f.dual_chunk else []) + as_configured(f)
    return FeatureReading(tuple(notes))


def cannot_serve(rope_type: str) -> str | None:
    """transformers is the reference every other reader is compared with: it serves what it evaluates."""
    return None
