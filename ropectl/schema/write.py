"""Writing RoPE settings into a config dict so transformers 4.x, 5.x and converters read the same thing.

The v4 form is a top-level base (``rope_theta``, or the model's own key) plus ``rope_scaling`` with both
``rope_type`` and ``type`` and no ``rope_theta`` inside; the v5 form is ``rope_parameters`` with
``rope_theta`` inside, nested by layer type for per-layer models. transformers 5 lets ``rope_scaling``
win over ``rope_parameters`` when both exist, so both forms must mean exactly the same thing.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from ropectl import families
from ropectl.errors import UsageError
from ropectl.families import (
    ALLOWED_TYPES,
    LEGACY_NESTED_MERGE,
    MSCALE_TYPES,
    TOP_LEVEL_ORIGINAL,
    exact_v4_keys,
    needs_head_dim,
)
from ropectl.rope.methods import TARGET, TRAINED, Method, is_prope_type, owner_of, rope_types_where
from ropectl.rope.params import RopeParams
from ropectl.schema.layers import ROPE_KEYS
from ropectl.schema.read import ModelRope

SCHEMAS = ("both", "v4", "v5")
# Where each model type's config class reads its base and partial rotary factor from in the v4 form.
THETA_KEYS = {"gpt_neox": "rotary_emb_base", "gpt_neox_japanese": "rotary_emb_base"}
PARTIAL_KEYS = {"gpt_neox": "rotary_pct"}
LOCAL_THETA_KEY = "rope_local_base_freq"
ORIGINAL = "original_max_position_embeddings"
SCALED_WITH_ORIGINAL = rope_types_where(lambda m: m.needs_original)
# The write form: which max_position_embeddings each rope type gets (docs/reference/write-form.md says why).
# ``target`` (the default) is what the readers users run in 2026 agree on: transformers >= 4.51 and 5.x read yarn's
# original length from the rope section, vLLM >= 0.30 derives yarn's serving length from max_position_embeddings
# (earlier releases from original x factor: the same number), and lm-eval, TGI and SGLang take it as the longest
# prompt. Only dynamic keeps the trained length: every transformers release scales it past max_position_embeddings.
# ``trained`` is the earlier form, for transformers 4.43-4.50 (they take yarn's original length from
# max_position_embeddings): yarn and linear keep the trained length too, and serving tools then need the length
# passed (lm-eval max_length, vLLM's override), which patch prints.
MAX_POSITION_FORMS = (TARGET, TRAINED)  # each method module's ``max_positions`` says where it is not the target


def check_max_positions(form: str) -> str:
    if form not in MAX_POSITION_FORMS:
        raise UsageError(f"unknown --max-positions '{form}'", f"use one of: {', '.join(MAX_POSITION_FORMS)}")
    return form


def check_schema(schema: str) -> str:
    if schema not in SCHEMAS:
        raise UsageError(f"unknown schema '{schema}'", f"use one of: {', '.join(SCHEMAS)}")
    return schema


def scaling_dict(rope: RopeParams) -> dict[str, Any]:
    """The type's own keys, with factor as a float (transformers 4 warns on an int)."""
    out: dict[str, Any] = {}
    for key, value in rope.scaling.items():
        if key == "factor":
            value = float(value)
        elif key in ("short_factor", "long_factor"):
            value = [float(v) for v in value]
        out[key] = value
    return out


def written_max_positions(rope: RopeParams, trained: int | None, form: str = "target") -> int | None:
    """max_position_embeddings in the write form (each method module's ``max_positions``)."""
    owner = owner_of(rope.rope_type)
    if owner is not None and owner.written_max_positions(form) == TRAINED:
        return rope.original_max_position_embeddings or trained or rope.max_position_embeddings
    return rope.max_position_embeddings


def v4_scaling(rope: RopeParams, model_type: str = "", max_pos: int | None = None) -> dict[str, Any] | None:
    """``rope_scaling`` in the v4 form, or None for unscaled RoPE (static NTK is only a base change).

    An original length equal to the written max_position_embeddings is left out: every version then
    takes the same value, and transformers 4.51-4.55 do not replace the factor. Config classes that demand
    exact keys (Phi-3, GPT-NeoX on 4.43) get only those when the rest is implied.
    """
    if rope.rope_type == "default":
        # a class whose default is scaled (gpt-oss) needs unscaled RoPE spelled out, or its default applies
        return {"rope_type": "default", "type": "default"} if families.class_default_rope(model_type) else None
    out = {"rope_type": rope.rope_type, "type": rope.rope_type, **scaling_dict(rope)}
    if (_asks(rope.rope_type, lambda m: m.original_from_max_positions) and max_pos is not None
            and out.get(ORIGINAL) == max_pos):
        del out[ORIGINAL]
    exact = exact_v4_keys(model_type)
    if exact is not None:
        original = out.get(ORIGINAL)
        implied = {"rope_type", ORIGINAL} | ({"factor"} if _factor_implied(out, original, max_pos) else set())
        if set(out) - implied <= exact:
            out = {k: v for k, v in out.items() if k in exact}
    return out


def _asks(rope_type: str, field: Callable[[Method], bool]) -> bool:
    """Whether the method that owns ``rope_type`` has ``field`` set (an unknown type has none)."""
    owner = owner_of(rope_type)
    return owner is not None and field(owner)


def _factor_implied(scaling: dict[str, Any], original: int | None, max_pos: int | None) -> bool:
    """A type whose missing factor is max_position_embeddings / original (longrope): is that the written factor?"""
    factor = scaling.get("factor")
    return _asks(str(scaling.get("type")), lambda m: m.implied_factor) and (factor is None or bool(
        original and max_pos and abs(max_pos / original - float(factor)) < 1e-12))


def v5_parameters(rope: RopeParams, partial: float | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"rope_type": rope.rope_type, "rope_theta": float(rope.rope_theta), **scaling_dict(rope)}
    if partial is not None:
        out["partial_rotary_factor"] = float(partial)
    return out


def rope_holder(config: dict[str, Any]) -> dict[str, Any]:
    """The dict that holds the RoPE keys: the config itself, or a multimodal wrapper's ``text_config``."""
    inner = config.get("text_config")
    if isinstance(inner, dict) and not any(k in config for k in ROPE_KEYS):
        return inner
    return config


def write_rope(
    config: Mapping[str, Any], model: ModelRope, rope: RopeParams, schema: str = "both",
    layer_ropes: Mapping[str, RopeParams] | None = None, trained: int | None = None,
) -> dict[str, Any]:
    """A copy of ``config`` whose RoPE keys say ``rope`` (and ``layer_ropes`` for per-layer models).

    ``trained`` is the unscaled model's context, written to a top-level ``original_max_position_embeddings``
    where one must stay but the new rope type has none.
    """
    check_schema(schema)
    out = copy.deepcopy(dict(config))
    holder = rope_holder(out)
    old = holder.get("rope_parameters")
    for key in ("rope_scaling", "rope_parameters"):
        holder.pop(key, None)
    trained = trained or rope.trained_context
    rope = _explicit_attention_factor(_with_mscales(model, rope, trained), model.model_type)
    max_pos = written_max_positions(rope, trained)
    scaling = v4_scaling(rope, model.model_type, max_pos)
    if layer_ropes:
        _write_nested(holder, model, rope, dict(layer_ropes), schema, scaling)
        _keep_other_sections(holder, old)
    else:
        _write_flat(holder, model, rope, schema, scaling)
    _write_max_positions(holder, model, rope, trained, max_pos)
    if model.head_dim and (holder.get("head_dim", 0) is None or (needs_head_dim(model.model_type)
                                                                  and not holder.get("head_dim"))):
        # transformers' yarn/llama3/dynamic code multiplies config.head_dim: null crashes it (Mixtral, MiniMax),
        # and MistralConfig 4.55+ keeps None when config.json has none.
        holder["head_dim"] = int(model.head_dim)
    return out


def _explicit_attention_factor(rope: RopeParams, model_type: str) -> RopeParams:
    """transformers 4.43's validation raises on longrope without attention_factor (except Phi-3, which takes only
    three keys); writing the value every version would compute changes nothing for the others."""
    if (not _asks(rope.rope_type, lambda m: m.explicit_attention_factor) or "attention_factor" in rope.scaling
            or exact_v4_keys(model_type) is not None):
        return rope
    from ropectl.rope.frequencies import compute_frequencies

    return rope.with_(scaling={**rope.scaling, "attention_factor": compute_frequencies(rope).attention_factor})


def _partial_for_v5(model: ModelRope) -> float | None:
    return model.partial_rotary_factor if model.partial_rotary_factor != 1.0 else None


def _write_flat(holder: dict[str, Any], model: ModelRope, rope: RopeParams, schema: str,
                scaling: dict[str, Any] | None) -> None:
    if schema in ("both", "v4"):
        _write_theta(holder, model, rope.rope_theta)
        _ensure_partial(holder, model)
        if scaling is not None:
            holder["rope_scaling"] = scaling
    else:
        _drop_theta(holder)
    if schema in ("both", "v5"):
        holder["rope_parameters"] = v5_parameters(rope, _partial_for_v5(model))


def _write_nested(
    holder: dict[str, Any], model: ModelRope, rope: RopeParams, layers: dict[str, RopeParams], schema: str,
    scaling: dict[str, Any] | None,
) -> None:
    # Only the global-attention layers are scaled; the others keep their own (local) base.
    layers[model.main_layer or "full_attention"] = rope
    # A flat rope_scaling is merged into full_attention only by Gemma3's config class; any other per-layer
    # model would fail on it in transformers 5 (KeyError), so those get the nested v5 form alone.
    legacy = schema in ("both", "v4") and (model.model_type in LEGACY_NESTED_MERGE or schema == "v4")
    if legacy:
        _write_theta(holder, model, rope.rope_theta)
        if "sliding_attention" in layers:
            holder[LOCAL_THETA_KEY] = float(layers["sliding_attention"].rope_theta)
        if scaling is not None:
            holder["rope_scaling"] = scaling
    else:
        _drop_theta(holder)
        holder.pop(LOCAL_THETA_KEY, None)
    if schema in ("both", "v5") or not legacy:
        holder["rope_parameters"] = {label: v5_parameters(p, _layer_partial(model, label, p))
                                     for label, p in sorted(layers.items())}


def _with_mscales(model: ModelRope, rope: RopeParams, trained: int | None) -> RopeParams:
    if model.model_type not in MSCALE_TYPES or rope.rope_type == "default":
        return rope
    from ropectl.rope.frequencies import compute_frequencies

    scale = compute_frequencies(rope).attention_factor  # what the rotary init computes, used at any length
    # PhimoeRotaryEmbedding.forward picks short/long_mscale against the section's original_max_position_embeddings
    # for every scaled type, and raises KeyError without it (linear and dynamic write none of their own)
    original = rope.original_max_position_embeddings or trained or rope.max_position_embeddings
    return rope.with_(scaling={**rope.scaling, "short_mscale": scale, "long_mscale": scale,
                               "original_max_position_embeddings": int(original)})


def _keep_other_sections(holder: dict[str, Any], old: Any) -> None:
    """Layer-type sections the model does not use, or that are null (no RoPE), stay as they were."""
    new = holder.get("rope_parameters")
    if isinstance(old, Mapping) and isinstance(new, dict):
        for label, value in old.items():
            if label not in new and (value is None or isinstance(value, Mapping)):
                new[label] = copy.deepcopy(value)


def _layer_partial(model: ModelRope, label: str, rope: RopeParams) -> float | None:
    if is_prope_type(rope.rope_type):
        return None  # p-RoPE keeps its partial factor among its own keys
    partial = model.layer_partials.get(label, model.partial_rotary_factor)
    return partial if partial != 1.0 else None


def _write_theta(holder: dict[str, Any], model: ModelRope, theta: float) -> None:
    key = THETA_KEYS.get(model.model_type, "rope_theta")
    holder[key] = float(theta)
    # A second base key left stale would contradict the first for some reader.
    for other in ("rope_theta", "rotary_emb_base"):
        if other != key and other in holder:
            holder[other] = float(theta)


def _drop_theta(holder: dict[str, Any]) -> None:
    for key in ("rope_theta", "rotary_emb_base"):
        holder.pop(key, None)


def _ensure_partial(holder: dict[str, Any], model: ModelRope) -> None:
    """The v4 form wins in transformers 5, so the partial rotary factor must also live outside the dict."""
    if model.partial_rotary_factor == 1.0 or any(k in holder for k in ("partial_rotary_factor", "rotary_pct",
                                                                       "rotary_dim")):
        return
    holder[PARTIAL_KEYS.get(model.model_type, "partial_rotary_factor")] = model.partial_rotary_factor


def _write_max_positions(holder: dict[str, Any], model: ModelRope, rope: RopeParams, trained: int | None,
                         max_pos: int | None) -> None:
    if max_pos is not None:
        key = next((k for k in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")
                    if k in holder), "max_position_embeddings")
        holder[key] = int(max_pos)
    # transformers 5 lets a top-level value override the dict's for llama3/yarn/longrope, so a stale one
    # would silently change the scaling: it is rewritten to the value that is true now. transformers 4 reads
    # longrope's original length only from the top level.
    top_level = _asks(rope.rope_type, lambda m: m.original_at_top_level)
    if ORIGINAL in holder or model.model_type in TOP_LEVEL_ORIGINAL or top_level:
        original = rope.original_max_position_embeddings if rope.rope_type in SCALED_WITH_ORIGINAL else trained
        if original:
            holder[ORIGINAL] = int(original)
        else:
            holder.pop(ORIGINAL, None)


def allowed_types(model_type: str) -> tuple[str, ...] | None:
    return ALLOWED_TYPES.get(model_type)
