"""The one interpreter of transformers ``Reader`` entries: a config dict in, the RoPE that version builds out.

It starts from the canonical reading (``ropectl.schema.read``, which follows transformers 5) of the
keys the version knows, then applies the entry's data: where it takes the original length from, when
it derives the factor, and the quirks of its model classes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ropectl import families
from ropectl.errors import RopectlError
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
    Reader,
    Reading,
    version_key,
)
from ropectl.rope.params import RopeParams
from ropectl.schema.read import TYPE_ALIASES

# The rope types transformers' ROPE_INIT_FUNCTIONS builds (4.43+; proportional is 5.x, where a quirk says so). A
# method registered outside ropectl may write another one: ropectl computes it, no transformers can load it.
BUILDS = frozenset({"default", "linear", "dynamic", "yarn", "longrope", "llama3", "proportional"})

MAIN = "main"
NULL_THETA = ("rope_theta is null in the rope section (transformers 5 saves that after `config.rope_scaling = "
              "{...}` on a config without rope_theta), so the model cannot be built")


def rope_section(cfg: Mapping[str, Any], v5: bool) -> dict[str, Any]:
    """The flat rope section the reader takes (full attention's for nested per-layer configs)."""
    raw = cfg.get("rope_scaling") or (cfg.get("rope_parameters") if v5 else None) or {}
    if not isinstance(raw, Mapping):
        return {}
    full = raw.get("full_attention")
    return dict(full) if isinstance(full, Mapping) else dict(raw)


def written_type(section: Mapping[str, Any]) -> str:
    return str(section.get("rope_type") or section.get("type") or "default")


def _is_flat_v5(cfg: Mapping[str, Any]) -> bool:
    params = cfg.get("rope_parameters")
    return not cfg.get("rope_scaling") and isinstance(params, Mapping) and "full_attention" not in params


def _apply_quirks(reader: Reader, cfg: dict[str, Any], version: str | None) -> tuple[str | None, list[str]]:
    """Rewrite ``cfg`` the way the version's classes read it; (error or None, notes)."""
    v5 = "rope_parameters" in reader.reads
    model_type = str(cfg.get("model_type") or "")
    raw_scaling = cfg.get("rope_scaling") if isinstance(cfg.get("rope_scaling"), Mapping) else None
    section = rope_section(cfg, v5)
    rope_type = written_type(section)
    notes: list[str] = []
    for quirk in reader.quirks_for(model_type, rope_type, version):
        kind = quirk.kind
        if kind in (UNKNOWN_MODEL, FAILS):
            return quirk.note, notes
        if kind == EXACT_KEYS and raw_scaling is not None and set(raw_scaling) != set(quirk.keys):
            return f"{quirk.note} (got {', '.join(sorted(raw_scaling))})", notes
        if kind == ONLY_TYPES and raw_scaling is not None and rope_type not in quirk.keys:
            return f"{quirk.note} (got '{rope_type}')", notes
        if kind == NEEDS_KEYS and raw_scaling is not None and not quirk.keys <= set(raw_scaling):
            return quirk.note, notes
        if kind == IGNORES_SCALING and raw_scaling is not None:
            cfg.pop("rope_scaling", None)
            notes.append(quirk.note)
        elif kind == HEAD_DIM_IGNORED and cfg.get("head_dim") and cfg.get("hidden_size"):
            cfg["head_dim"] = int(cfg["hidden_size"]) // int(cfg["num_attention_heads"])
        elif kind == FLAT_V5_UNSCALED and v5 and _is_flat_v5(cfg):
            cfg.pop("rope_parameters")
            notes.append(quirk.note)
        elif kind == NO_PARTIAL:
            notes.append(quirk.note)  # checked once the partial factor is known
        elif kind == NEEDS_HEAD_DIM and not cfg.get("head_dim"):
            return quirk.note, notes
        elif kind == FIXED_LONGROPE:
            notes.append(quirk.note)  # applied to the built RoPE below
        elif kind == PARTIAL_IGNORED and _partial_set(cfg):
            for key in ("partial_rotary_factor", "rotary_pct", "rotary_dim"):
                cfg.pop(key, None)
            notes.append(quirk.note)
    return None, notes


def _fixed_list(reader: Reader, p: RopeParams, model_type: str, version: str | None) -> RopeParams:
    """Versions whose longrope uses one list at every length: both lists become that one."""
    for quirk in reader.quirks_for(model_type, p.rope_type, version):
        if quirk.kind == FIXED_LONGROPE and p.rope_type == "longrope":
            chosen = p.scaling[next(iter(quirk.keys))]
            return p.with_(scaling={**p.scaling, "short_factor": chosen, "long_factor": chosen})
    return p


def _partial_set(cfg: Mapping[str, Any]) -> bool:
    return any(cfg.get(k) not in (None, 1, 1.0) for k in ("partial_rotary_factor", "rotary_pct", "rotary_dim"))


def _original_and_factor(reader: Reader, p: RopeParams, cfg: Mapping[str, Any],
                         section: Mapping[str, Any]) -> RopeParams:
    sources = reader.original_from.get(p.rope_type)
    if not sources:
        return p
    values = {TOP: cfg.get("original_max_position_embeddings"),
              DICT: section.get("original_max_position_embeddings"), MAX_POS: p.max_position_embeddings}
    original = next((values[s] for s in sources if values[s]), None)
    scaling = dict(p.scaling)
    if original:
        scaling["original_max_position_embeddings"] = int(original)
    rule = reader.derived_factor.get(p.rope_type, "")
    source = DICT if "rope section" in rule else TOP if "top-level" in rule else None
    if source and values[source] and p.max_position_embeddings:
        scaling["factor"] = p.max_position_embeddings / int(values[source])
    return p.with_(scaling=scaling)


def interpret(reader: Reader, config: Mapping[str, Any], version: str | None = None) -> Reading:
    from ropectl.schema.layers import ROPE_KEYS, text_config
    from ropectl.schema.read import read_model_rope

    v5 = "rope_parameters" in reader.reads
    cfg = dict(text_config(config))
    unknown = [q.note for q in reader.quirks_for(str(cfg.get("model_type") or ""), "", version) if q.kind == UNKNOWN_MODEL]
    if unknown:  # before anything it would read: a version without the model type cannot load it at all
        return Reading(reader, error=unknown[0])
    ignored = [key for key in reader.ignores if cfg.get(key) is not None]
    for key in reader.ignores:
        cfg.pop(key, None)
    # transformers 5 also fills the default over an explicit null; 4.x keeps the null (unscaled RoPE)
    if not any(cfg.get(k) is not None if v5 else k in cfg for k in ("rope_scaling", "rope_parameters")):
        with_original = version_key(reader.versions.low) >= (4, 56)  # GptOssConfig's default gained it in 4.56
        for key, value in families.class_default_rope(str(cfg.get("model_type") or ""), with_original).items():
            cfg[key] = cfg[key] if cfg.get(key) is not None else value
    if ignored and not any(cfg.get(k) is not None for k in ROPE_KEYS) and cfg.get("model_type") not in families.ROPE_MODEL_TYPES:
        # only keys this version does not read, on a model type not known to be RoPE in every release: a type it may
        # lack (Qwen3.5 is 5.x only); a known one (llama) builds plain RoPE with the default base, read below
        return Reading(reader, error=f"this config names its RoPE only in {', '.join(ignored)}, which this version "
                                     f"does not read; it builds plain RoPE with its default base, or does not know "
                                     f"model type '{cfg.get('model_type')}' at all")
    if v5 and "rope_theta" in rope_section(cfg, v5) and rope_section(cfg, v5)["rope_theta"] is None:
        return Reading(reader, error=NULL_THETA)
    error, notes = _apply_quirks(reader, cfg, version)
    if error:
        return Reading(reader, error=error, notes=tuple(notes))
    rope_type = TYPE_ALIASES.get(written_type(rope_section(cfg, v5)), written_type(rope_section(cfg, v5)))
    if rope_type not in BUILDS:  # a method registered outside ropectl: ropectl computes it, transformers cannot
        return Reading(reader, error=f"transformers has no rope type '{rope_type}'", notes=tuple(notes))
    try:
        model = read_model_rope(cfg)
    except RopectlError as exc:
        return Reading(reader, error=exc.problem if hasattr(exc, "problem") else str(exc), notes=tuple(notes))
    if model.partial_rotary_factor < 1 and any("partial_rotary_factor" in n for n in notes):
        return Reading(reader, error=next(n for n in notes if "partial_rotary_factor" in n))
    section = rope_section(cfg, v5)
    ropes = dict(model.layer_ropes) or {MAIN: model.rope}
    for p in ropes.values():
        short = p.scaling.get("short_factor")
        if p.rope_type == "longrope" and short is not None and len(short) != p.rotary_dim // 2:
            return Reading(reader, error=f"longrope short_factor has {len(short)} numbers but the rotary embedding "
                                         f"has {p.rotary_dim // 2} frequencies", notes=tuple(notes))
    adjusted = {k: _fixed_list(reader, _original_and_factor(reader, p, cfg, section if k in (MAIN, "full_attention")
                                                               else {}), model.model_type, version)
                for k, p in ropes.items()}
    return Reading(reader, adjusted, notes=tuple(n for n in notes if "partial_rotary_factor" not in n))
