"""The one home of config-schema differences: transformers 4.x vs 5.x, and per-model key names.

transformers 4.x reads a top-level ``rope_theta`` and ``rope_scaling`` (``type`` or ``rope_type``);
5.x reads ``rope_parameters`` (``rope_theta`` inside, optionally nested per layer type), but lets a
legacy ``rope_scaling`` win when both exist, and lets a top-level ``original_max_position_embeddings``
override the dict's for llama3, yarn and longrope. Reading here follows the 5.x rules, so what we
report is what the installed transformers builds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ropectl import families
from ropectl.errors import ConfigError, NoRopeError
from ropectl.families import cards
from ropectl.families.attention import AttentionFeatures, attention_features
from ropectl.rope.methods import is_prope_type, method_of_type, owner_of, rope_types, rope_types_where, type_aliases
from ropectl.rope.params import RopeParams
from ropectl.schema import validate
from ropectl.schema.layers import ROPE_KEYS, layer_head_dims, main_label, text_config

SCALED_TYPES_WITH_ORIGINAL = rope_types_where(lambda m: m.needs_original)
GEMMA_LOCAL_THETA = 1e4


@dataclass(frozen=True)
class ModelRope:
    """A checkpoint's RoPE as transformers will build it, plus the shapes other commands need."""

    model_type: str
    architectures: tuple[str, ...]
    head_dim: int
    rotary_dim: int
    partial_rotary_factor: float
    num_attention_heads: int
    num_key_value_heads: int
    hidden_size: int | None
    rope: RopeParams
    layer_ropes: Mapping[str, RopeParams] = field(default_factory=dict)
    schema: str = "none"  # which keys config.json spells: v4, v5, both or none
    rope_interleave: bool | None = None
    record: Mapping[str, Any] = field(default_factory=dict)  # what ropectl wrote into config.json
    warnings: tuple[str, ...] = ()
    main_layer: str | None = None  # per-layer models: the label of the global-attention rope (``rope``)
    layer_partials: Mapping[str, float] = field(default_factory=dict)  # per-layer partial rotary factors
    # A model card's pretraining length where the config names none (Qwen3: 32,768 under max positions 40,960),
    # the card's name, and a note when a card is only partly matched (``ropectl.families.cards``).
    native_context: int | None = None
    card: str | None = None
    card_note: str | None = None
    # What the config names beside its RoPE: NoPE layers, sliding / chunked attention, a query temperature, DCA.
    attention: AttentionFeatures | None = None


def _first(cfg: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    return None


def with_aliases(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    """``cfg`` with the canonical keys filled from the family's own names (transformers' attribute_map)."""
    model_type = str(cfg.get("model_type") or "")
    aliases = families.KEY_ALIASES.get(model_type, {})
    filled = {key: cfg[alias] for key, alias in aliases.items() if cfg.get(key) is None and cfg.get(alias) is not None}
    for key, value in families.CLASS_DEFAULTS.get(model_type, {}).items():
        if key not in cfg and key not in filled:
            filled[key] = value
    if not any(cfg.get(k) is not None for k in ("rope_scaling", "rope_parameters")):
        for key, value in families.class_default_rope(model_type).items():
            filled.setdefault(key, cfg[key] if cfg.get(key) is not None else value)
    for key, (sub, alias) in families.NESTED_ALIASES.get(model_type, {}).items():
        inner = cfg.get(sub)
        if cfg.get(key) is None and isinstance(inner, Mapping) and inner.get(alias) is not None:
            filled[key] = inner[alias]
    return {**cfg, **filled} if filled else cfg


def check_uses_rope(cfg: Mapping[str, Any]) -> str:
    model_type = str(cfg.get("model_type") or "")
    if model_type in families.NOT_TEXT_TYPES:
        raise NoRopeError(
            f"model type '{model_type}' is {families.NOT_TEXT_TYPES[model_type]}: its RoPE does not index a "
            "text context, so there is no context length to scale",
            "point ropectl at the text model's config.json (or the multimodal wrapper holding its text_config)",
        )
    has_keys = any(cfg.get(k) is not None for k in ROPE_KEYS)
    alibi = bool(cfg.get("alibi")) or bool(cfg.get("position_embedding_type") not in (None, "rope", "rotary"))
    unknown = not has_keys and model_type not in families.ROPE_MODEL_TYPES
    if model_type in families.NO_ROPE_TYPES or (alibi and not has_keys) or unknown:
        what = f"model type '{model_type}'" if model_type else "this config (no model_type, no RoPE keys)"
        raise NoRopeError(
            f"{what} does not use rotary position embeddings, so there is no RoPE to inspect or scale",
            "point ropectl at a RoPE model (Llama, Qwen, Mistral, Gemma, Phi, GPT-NeoX ...), "
            "or add rope_theta to config.json if this one really uses RoPE",
        )
    return model_type


def _shapes(cfg: Mapping[str, Any]) -> tuple[int, int, int | None, int]:
    heads = _first(cfg, "num_attention_heads", "n_head", "num_heads", "n_heads")
    hidden = _first(cfg, "hidden_size", "n_embd", "d_model", "dim")
    if heads is None:
        raise ConfigError("config.json gives no number of attention heads", "add num_attention_heads")
    heads = validate.heads("num_attention_heads", heads)
    hidden = None if hidden is None else validate.config_int("hidden_size", hidden, "4096")
    kv = _first(cfg, "num_key_value_heads", "num_kv_heads", "n_head_kv", "n_kv_heads")
    kv = validate.heads("num_key_value_heads", kv) if kv is not None else 1 if cfg.get("multi_query") else heads
    head_dim = cfg.get("head_dim") if cfg.get("head_dim") is not None else (max(hidden // heads, 1) if hidden else None)
    if str(cfg.get("model_type")) in families.MLA_ROPE_HEAD_DIM and cfg.get("qk_rope_head_dim"):
        head_dim = cfg["qk_rope_head_dim"]  # MLA rotates only the rope part of each head
    if head_dim is None:
        raise ConfigError("config.json gives neither head_dim nor hidden_size", "add head_dim or hidden_size")
    return heads, kv, hidden, validate.head_dim(head_dim)


def _partial(cfg: Mapping[str, Any], section: Mapping[str, Any], head_dim: int, model_type: str) -> float:
    value = _first(section, "partial_rotary_factor")
    if value is None:
        value = _first(cfg, "partial_rotary_factor", "rotary_pct")
    if value is None and cfg.get("rotary_dim") is not None and model_type not in families.ROTARY_DIM_IGNORED:
        value = validate.config_int("rotary_dim", cfg["rotary_dim"], "64", head_dim) / head_dim
    if value is None and model_type == "gptj":
        value = 64 / head_dim
    if value is None:
        value = families.DEFAULT_PARTIAL.get(model_type, 1.0)
    value = validate.number("partial_rotary_factor", value, "0.5")
    if not 0 < value <= 1:
        raise ConfigError(f"partial rotary factor {value} is outside (0, 1]", "fix partial_rotary_factor / rotary_pct")
    return value


def _section(cfg: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    legacy, modern = cfg.get("rope_scaling"), cfg.get("rope_parameters")
    for name, value in (("rope_scaling", legacy), ("rope_parameters", modern)):
        if value is not None and not isinstance(value, Mapping):
            raise ConfigError(f"config.json '{name}' is not an object", f"make '{name}' a JSON object or null")
    schema = {(True, True): "both", (True, False): "v4", (False, True): "v5"}.get((bool(legacy), bool(modern)))
    if schema is None:
        schema = "v4" if cfg.get("rope_theta") is not None else "none"
    # transformers 5 takes the legacy key when both exist; copy so the caller's dict stays untouched.
    return dict(legacy or modern or {}), schema


def _is_nested(section: Mapping[str, Any], cfg: Mapping[str, Any]) -> bool:
    """A per-layer-type section: every value is a section (or null), whatever the labels are called."""
    return bool(section) and all(isinstance(v, Mapping) or v is None for v in section.values()) and any(
        isinstance(v, Mapping) for v in section.values()
    )


# Qwen2-VL / Qwen2.5-VL hub configs say "type": "mrope": their config classes (transformers 4.x and 5) and vLLM
# read that as default RoPE split into mrope_section, and transformers 5 saves it as rope_type "default" beside it.
# The methods' own spellings ("su" for longrope) are their records' ``aliases``.
TYPE_ALIASES = {"mrope": "default", **type_aliases()}


def _rope_type(section: Mapping[str, Any]) -> str:
    new, old = section.get("rope_type"), section.get("type")
    if new is not None and old is not None and TYPE_ALIASES.get(str(new), new) != TYPE_ALIASES.get(str(old), old):
        raise ConfigError(
            f"the rope section contradicts itself: rope_type is '{new}' but type is '{old}'",
            "make 'type' and 'rope_type' equal, or drop 'type'",
        )
    rope_type = str(new or old or "default")
    return TYPE_ALIASES.get(rope_type, rope_type)


def _params(section: Mapping[str, Any], theta: float, rotary_dim: int, cfg: Mapping[str, Any]) -> RopeParams:
    rope_type = _rope_type(section)
    if section.get("rope_theta") is not None:
        theta = validate.rope_theta("rope_theta", section["rope_theta"])
    # proportional keeps its own partial factor: it pads the unrotated part with zero frequencies.
    own = ("rope_type", "type", "rope_theta") + (() if is_prope_type(rope_type) else ("partial_rotary_factor",))
    scaling = {k: v for k, v in section.items() if k not in own}
    max_pos = _first(cfg, "max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")
    if rope_type in SCALED_TYPES_WITH_ORIGINAL:
        # transformers 5: a top-level value silently overrides the dict's.
        original = _first(cfg, "original_max_position_embeddings") or _first(
            scaling, "original_max_position_embeddings") or max_pos
        if original is None:
            raise ConfigError(
                f"rope type '{rope_type}' needs original_max_position_embeddings and none can be inferred",
                "add original_max_position_embeddings (the pretraining context) to the rope section",
            )
        scaling["original_max_position_embeddings"] = validate.config_int("original_max_position_embeddings",
                                                                          original, "4096")
    max_pos = None if max_pos is None else validate.config_int("max_position_embeddings", max_pos, "4096")
    params = RopeParams(rope_type, theta, rotary_dim, max_pos, scaling)
    _validate(params)
    return params


def _validate(params: RopeParams) -> None:
    from ropectl.rope.frequencies import compute_frequencies

    known = rope_types()
    if params.rope_type in families.VISION_ROPE_TYPES:
        raise NoRopeError(
            f"rope type '{params.rope_type}' is a 2-D RoPE over image patch rows and columns, not text positions, "
            "so there is no context length to scale",
            "point ropectl at the text model's config.json (or the multimodal wrapper holding its text_config)",
        )
    if params.rope_type not in known:
        named = method_of_type(params.rope_type)
        hint = f" ({named.not_a_type})" if named is not None and named.not_a_type else ""
        raise ConfigError(
            f"config.json names rope type '{params.rope_type}', which transformers cannot build{hint}",
            f"use one of {', '.join(known)}; `ropectl patch --method ntk` writes NTK correctly",
        )
    factor = params.scaling.get("factor")
    owner = owner_of(params.rope_type)
    if factor is None and owner is not None and owner.needs_factor(params.max_position_embeddings):
        raise ConfigError(f"rope type '{params.rope_type}' has no factor", "add a factor above 1 to the rope section")
    if factor is not None:
        validate.factor(factor)
    validate.rope_theta("rope_theta", params.rope_theta)
    try:
        compute_frequencies(params)
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"rope type '{params.rope_type}' section is malformed ({exc})", "fix the rope section") from None


def _nested_ropes(cfg: Mapping[str, Any], section: Mapping[str, Any], head_dim: int, model_type: str,
                  theta: float) -> tuple[dict[str, RopeParams], dict[str, float]]:
    ropes, partials = {}, {}
    dims = layer_head_dims(cfg, head_dim)
    # transformers builds a rotary table only for the layer types in use (when they name the sections at all)
    used = set(cfg.get("layer_types") or ()) & set(section) or set(section)
    for label, sub in section.items():
        if sub is None or label not in used:
            continue
        layer_dim = dims.get(label, head_dim)
        partials[label] = _partial(cfg, sub, layer_dim, model_type)
        rotary = layer_dim if is_prope_type(_rope_type(sub)) else _rotary_dim(layer_dim, partials[label])
        ropes[label] = _params(sub, theta, rotary, cfg)
    return ropes, partials


def _rotary_dim(head_dim: int, partial: float) -> int:
    return validate.rotary_dim(int(head_dim * partial), head_dim)


def read_model_rope(raw: Mapping[str, Any]) -> ModelRope:
    """Parse a config.json dict (either schema) into the RoPE that transformers 5 would build."""
    cfg = with_aliases(text_config(raw))
    model_type = check_uses_rope(cfg)
    heads, kv, hidden, head_dim = _shapes(cfg)
    section, schema = _section(cfg)
    theta = validate.theta_or_default(_first(cfg, "rope_theta", "rotary_emb_base"), families.DEFAULT_THETA.get(model_type, 1e4))
    layer_ropes: dict[str, RopeParams] = {}
    partials: dict[str, float] = {}
    main_name = None
    if _is_nested(section, cfg):
        layer_ropes, partials = _nested_ropes(cfg, section, head_dim, model_type, theta)
        main_name = main_label(list(layer_ropes))
        partial = partials[main_name]
    else:
        partial = _partial(cfg, section, head_dim, model_type)
        if model_type.startswith("gemma3") or cfg.get("rope_local_base_freq") is not None:
            # Gemma3: legacy scaling and rope_theta apply to full attention; sliding layers keep their own base.
            main_name = "full_attention"
            full = layer_ropes[main_name] = _params(section, theta, _rotary_dim(head_dim, partial), cfg)
            local = validate.theta_or_default(cfg.get("rope_local_base_freq"), GEMMA_LOCAL_THETA, "rope_local_base_freq")
            layer_ropes["sliding_attention"] = RopeParams("default", local, full.rotary_dim, full.max_position_embeddings)
    main = layer_ropes[main_name] if main_name else _params(section, theta, _rotary_dim(head_dim, partial), cfg)
    published = _as_published(raw, cfg)
    found = cards.match_card(published or raw)
    if published is not None and found.card is None:
        found = cards.CardMatch()  # ropectl's own output: its lengths are its record's, no "resembles" note
    native = cards.native_context(published or raw, found.card)
    attention = attention_features(cfg)
    dca = attention.dual_chunk
    if native is None and dca and dca.original and main.max_position_embeddings and \
            dca.original < main.max_position_embeddings:
        native = dca.original  # Qwen2.5-1M: 1,010,000 max positions served by DCA over a 262,144 training length
    return ModelRope(
        model_type=model_type,
        architectures=tuple(cfg.get("architectures") or raw.get("architectures") or ()),  # a wrapper's, if composite
        head_dim=head_dim,
        rotary_dim=main.rotary_dim,
        partial_rotary_factor=partial,
        num_attention_heads=heads,
        num_key_value_heads=int(kv),
        hidden_size=hidden,
        rope=main,
        layer_ropes=layer_ropes,
        schema=schema,
        rope_interleave=cfg.get("rope_interleave"),
        record=dict(cfg.get("ropectl") or {}),
        warnings=tuple(_warnings(cfg, section, schema, main) + validate.warnings_for(cfg, main.factor)),
        main_layer=main_name,
        layer_partials=partials,
        native_context=native,
        card=found.card.name if found.card else None,
        card_note=found.note,
        attention=attention,
    )


def _as_published(raw: Mapping[str, Any], cfg: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The config a model card is matched against when ropectl patched this one: as its publisher shipped it (the
    record's unscaled theta and max_position_embeddings, no scaling), so the card still applies. None when the
    config carries no record of its unscaled base."""
    record = cfg.get("ropectl")
    base = record.get("base") if isinstance(record, Mapping) else None
    if not isinstance(base, Mapping) or not base.get("rope_theta"):
        return None
    shipped = {"rope_theta": base["rope_theta"], "original_max_position_embeddings": None, "rope_scaling": None,
               "rope_parameters": None}
    if base.get("max_position_embeddings"):
        shipped["max_position_embeddings"] = base["max_position_embeddings"]
    return {**raw, **shipped}


def _warnings(cfg: Mapping[str, Any], section: Mapping[str, Any], schema: str, rope: RopeParams) -> list[str]:
    out = []
    top, inner = cfg.get("rope_theta"), section.get("rope_theta")
    if top is not None and inner is not None and float(top) != float(inner):
        out.append(f"rope_theta differs: top-level {top} (transformers 4) vs {inner} in the rope section (transformers 5)")
    if schema == "v5" and _first(cfg, "rope_theta", "rotary_emb_base") is None and (
            rope.rope_type != "default" or float(rope.rope_theta) != 10000.0) and (
            cfg.get("model_type") not in families.V5_ONLY_TYPES):  # 4.x cannot load those at all (engines say so)
        # a top-level base is the v4 reading of the theta (an NTK patch writes no rope_scaling, only that); plain
        # RoPE at 10000 is what 4.x builds anyway (transformers 5 saves configs so)
        out.append("only the transformers 5 key rope_parameters is set: transformers 4.x ignores it and uses theta=10000")
    legacy, modern = cfg.get("rope_scaling"), cfg.get("rope_parameters")
    if schema == "both" and isinstance(modern, Mapping) and not _is_nested(modern, cfg):
        if _rope_type(dict(modern)) != _rope_type(dict(legacy or {})):
            out.append("rope_scaling and rope_parameters disagree; transformers 5 silently uses rope_scaling")
    dict_orig = section.get("original_max_position_embeddings")
    top_orig = cfg.get("original_max_position_embeddings")
    if rope.rope_type in SCALED_TYPES_WITH_ORIGINAL and top_orig and dict_orig and int(top_orig) != int(dict_orig):
        out.append(f"top-level original_max_position_embeddings={top_orig} overrides {dict_orig} in the rope section")
    return out
