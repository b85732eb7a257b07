"""How SGLang reads a RoPE config, and the ``--json-model-override-args`` line that makes it serve a target.

Read in the sglang 0.5.23 wheel (python/sglang/srt), the release tests/compat/test_sglang.py runs:

- ``utils/hf_transformers/config.py`` ``get_config``: config.json is loaded with transformers 5, then each top-level
  key of ``--json-model-override-args`` is set on the config; a dict onto a sub-config (``text_config``) is
  ``update``d into it (each key replaced whole), and a dict onto ``rope_parameters`` / ``rope_scaling`` is merged key
  by key into the one the model shipped (the fix of sgl-project/sglang#41227, where an override under
  ``rope_scaling`` lost ``rope_theta``). So every key get_rope reads is spelled, ``rope_theta`` included, and a
  composite model's section goes under ``text_config`` whole.
- ``utils/hf_transformers/common.py`` ``get_context_length``: the first of max_sequence_length, seq_length,
  max_seq_len, model_max_length, max_position_embeddings, times the section's ``factor`` unless it has
  ``original_max_position_embeddings`` or is llama3; ``--context-length`` above that raises unless
  SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 (``configs/model_config.py`` ``_derive_context_length``). The line sets
  ``max_position_embeddings`` to the target, from which every type derives at least the target.
- ``layers/rotary_embedding/factory.py`` ``get_rope``, called by the model files with the whole ``rope_parameters``
  (``get_rope_config``) and ``max_position_embeddings``: yarn reads ``attn_factor`` (a multiplier), ``mscale`` and
  ``mscale_all_dim`` (their ratio only when both are set), never ``attention_factor``; multimodal yarn reads only
  ``attn_factor``; longrope reads ``short_mscale`` / ``long_mscale``, else sqrt(1 + ln s / ln original) with
  s = max_position_embeddings / original, and switches to the long list for the whole batch once a position
  exceeds the original length (``rope_variant.py`` Phi3LongRoPEScaledRotaryEmbedding.forward,
  ``torch.any(positions > k)``; the same in 0.4.10, 0.5.5 and 0.5.15), where transformers switches per sequence, once
  its length does (one position earlier); dynamic is one static base for max_position_embeddings x factor;
  proportional (Gemma4RotaryEmbedding) ignores ``factor``; a section with ``mrope_section`` is multimodal only for
  default and yarn. Whenever the model file passes ``dual_chunk_attention_config`` (qwen2, qwen2_moe, qwen3_moe,
  glm4), get_rope builds DualChunkRotaryEmbedding from rope_theta, chunk_size and local_size before it reads the
  rope section; its attention backend (``dual_chunk_flashattention_backend``) was removed in 0.5.20.
- ``models/llama4.py``: NoPE on every 4th layer, ``(layer_id + 1) % 4``, whatever ``no_rope_layers`` says; the query
  temperature from ``attn_temperature_tuning``, ``attn_scale`` and ``floor_scale``; ``models/ministral3.py``: the Llama 4
  query temperature with ``rope_parameters.llama_4_scaling_beta`` over a top-level ``original_max_position_embeddings``
  (16,384 when the config has none), not the rope section's.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping
from typing import Any

from ropectl.readers import sglang_models as sm
from ropectl.readers.base import DICT, MAX_POS, TOP, Quirk, Reader, Reading, ServeView, VersionRange
from ropectl.readers.features import features_of, with_features
from ropectl.rope.formulas import dynamic_theta, yarn_mscale
from ropectl.rope.methods import rope_types_where
from ropectl.rope.params import RopeParams

ENGINE = "SGLang"
# recommend --serve-with; only when asked, since by default it would leave out what SGLang cannot serve
SERVE_AS, SERVED_BY_DEFAULT = "sglang", False
COMMAND = ("python", "-m", "sglang.launch_server")
# Quirk kinds of this engine, interpreted below.
LENGTH_TIMES_FACTOR = "length-times-factor"
STATIC_DYNAMIC = "static-dynamic"
YARN_ATTN = "yarn-reads-attn-factor"
LONGROPE_MSCALE = "longrope-reads-mscale-keys"
PROPORTIONAL = "proportional-ignores-factor"
MROPE_ONE_D = "mrope-only-default-and-yarn"

CONTEXT_KEYS = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings")
SERVING = ("first of max_sequence_length, seq_length, max_seq_len, model_max_length, max_position_embeddings, x factor "
           "unless the rope section has original_max_position_embeddings or is llama3; --context-length above it "
           "raises unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1")
EMIT_FIX = "`ropectl patch MODEL ... --emit sglang` prints the line that serves it"

_DYNAMIC = Quirk(STATIC_DYNAMIC, "dynamic is static: one base for max_position_embeddings x factor (transformers' "
                 "base at that length), at every length", rope_types=frozenset({"dynamic"}),
                 fix="serve the static equivalent for one length: `ropectl patch MODEL -m dynamic:F --emit sglang`")
STATIC_DYNAMIC_NOTE = _DYNAMIC.note
_YARN = Quirk(YARN_ATTN, "YaRN ignores attention_factor: its cos/sin scale is attn_factor x (mscale(factor, mscale) / "
              "mscale(factor, mscale_all_dim) when both are set, else 0.1 ln(factor) + 1; multimodal: always the "
              "latter)", rope_types=frozenset({"yarn"}), fix=EMIT_FIX)
_LONGROPE = Quirk(LONGROPE_MSCALE, "LongRoPE ignores attention_factor: its cos/sin scale is long_mscale, else "
                  "sqrt(1 + ln(max_position_embeddings / original) / ln(original)); it switches lists per batch, one "
                  "position later than transformers", rope_types=frozenset({"longrope"}), fix=EMIT_FIX)
_DCA = Quirk("dual-chunk-no-backend", sm.DCA_NOTE, fix="serve a copy of config.json without dual_chunk_attention_config: "
             "plain RoPE, as transformers runs it (no DCA)")
_PROPORTIONAL = Quirk(PROPORTIONAL, "proportional RoPE (Gemma4RotaryEmbedding) does not read factor",
                      rope_types=frozenset({"proportional"}), fix="none in SGLang: ntk (a new base) is served")
_MROPE = Quirk(MROPE_ONE_D, "get_rope builds multimodal RoPE for a section with mrope_section only when its type is "
               "default or yarn; any other type gets a one-dimensional rotary embedding fed three-row positions",
               fix="patch with yarn, or ntk (a new base)")
_TIMES = Quirk(LENGTH_TIMES_FACTOR, "derived context length = max_position_embeddings x factor unless the rope section "
               "has original_max_position_embeddings or is llama3", fix=EMIT_FIX)
_ORIGINAL = {t: (TOP, DICT, MAX_POS) for t in rope_types_where(lambda m: m.needs_original)}

READERS: tuple[Reader, ...] = (
    Reader(ENGINE, VersionRange("0.5.23"), ("rope_parameters", "rope_scaling", "max_position_embeddings"), (),
           _ORIGINAL, {}, SERVING, (_MROPE, _YARN, _LONGROPE, _PROPORTIONAL, _DYNAMIC, _TIMES, _DCA), ("0.5.23",)),
)


def newest() -> Reader:
    return READERS[-1]


def cannot_serve(rope_type: str) -> str | None:
    """Why SGLang does not compute what transformers evaluates for ``rope_type`` (dynamic is static there), or None."""
    return f"SGLang: {STATIC_DYNAMIC_NOTE}" if rope_type in _DYNAMIC.rope_types else None


def _yarn_scale(scaling: Mapping[str, Any]) -> float:
    """The cos/sin scale SGLang's YaRN classes compute from a section, before attn_factor."""
    factor = float(scaling.get("factor") or 1.0)
    mscale, all_dim = scaling.get("mscale"), scaling.get("mscale_all_dim")
    if mscale is not None and all_dim is not None and "mrope_section" not in scaling:
        return yarn_mscale(factor, float(mscale)) / yarn_mscale(factor, float(all_dim))
    return yarn_mscale(factor)


def _longrope_scale(rope: RopeParams) -> float:
    original = int(rope.original_max_position_embeddings or rope.max_position_embeddings or 1)
    s = int(rope.max_position_embeddings or original) / original
    return 1.0 if s <= 1 else math.sqrt(1 + math.log(s) / math.log(original))


def _built(rope: RopeParams) -> RopeParams | str:
    """What get_rope builds from ``rope`` as SGLang holds it (the error it raises, or a reading ropectl can compare)."""
    sc, kind = dict(rope.scaling), rope.rope_type
    if "mrope_section" in sc and kind not in ("default", "yarn"):
        return f"SGLang {_MROPE.note}; this section is {kind}"
    if kind == "yarn" and "mrope_section" in sc and ("mscale" in sc or "mscale_all_dim" in sc):
        return "SGLang's multimodal YaRN (YaRNScalingMRotaryEmbedding) raises TypeError on mscale / mscale_all_dim"
    if kind == "yarn":
        scale = _yarn_scale(sc) * float(sc.get("attn_factor", 1.0))
        kept = {k: v for k, v in sc.items() if k not in ("mscale", "mscale_all_dim", "attention_factor")}
        return rope.with_(scaling={**kept, "attention_factor": scale})
    if kind == "longrope":
        scale = sc.get("long_mscale")
        kept = {k: v for k, v in sc.items() if k not in ("attention_factor", "short_mscale", "long_mscale")}
        return rope.with_(scaling={**kept, "attention_factor": float(scale) if scale is not None else _longrope_scale(rope)})
    if kind == "proportional":
        return rope.with_(scaling={k: v for k, v in sc.items() if k != "factor"})
    if kind == "dynamic":
        max_pos = int(rope.max_position_embeddings or 2048)
        factor = float(rope.factor or 1.0)
        theta = dynamic_theta(rope.rope_theta, factor, rope.rotary_dim, max_pos, int(max_pos * factor))
        return RopeParams("default", theta, rope.rotary_dim, int(max_pos * factor), {})
    return rope


def _changed(p: RopeParams, built: RopeParams) -> bool:
    from ropectl.readers.parity import rope_difference

    return rope_difference({"main": built}, {"main": p}, (None,)) is not None


def context_length(text: Mapping[str, Any], section: Mapping[str, Any] | None) -> int:
    """SGLang's derived context length (``get_context_length``) for a text config and its rope section."""
    section = section if isinstance(section, Mapping) else {}
    factor = 1.0
    if section and "original_max_position_embeddings" not in section and section.get("rope_type") != "llama3":
        factor = float(section.get("factor") or 1)
    value = next((text[k] for k in CONTEXT_KEYS if text.get(k) is not None), None)
    return int(factor * value) if value is not None else 2048


def predict(reader: Reader, config: Mapping[str, Any], version: str | None = None) -> Reading:
    """What SGLang's get_rope builds from ``config`` (loaded by transformers 5), and its derived context length."""
    from ropectl.readers import transformers as tf
    from ropectl.schema.layers import text_config

    base = tf.predict(tf.READERS[-1], config)  # SGLang loads config.json with transformers 5
    if not base.ok:
        return Reading(reader, error=base.error, notes=base.notes)
    ropes, notes = {}, list(base.notes)
    for layer, p in base.ropes.items():
        built = _built(p)
        if isinstance(built, str):
            return Reading(reader, error=built, notes=tuple(notes))
        if _changed(p, built):  # the quirks of this rope type (and of a multimodal section) that changed it
            notes += [q.note for q in reader.quirks_for("", p.rope_type) if q.kind != LENGTH_TIMES_FACTOR and (
                p.rope_type in q.rope_types or q.kind == MROPE_ONE_D and "mrope_section" in p.scaling)]
        ropes[layer] = built
    text = text_config(config)
    main = base.ropes.get("full_attention") or next(iter(base.ropes.values()))
    section = text.get("rope_parameters") or text.get("rope_scaling")
    if not isinstance(section, Mapping) or "rope_type" not in section and "type" not in section:
        section = {"rope_type": main.rope_type, **main.scaling}  # per-layer sections: SGLang finds no top factor
    served = context_length({**text, "max_position_embeddings": text.get("max_position_embeddings")
                             or main.max_position_embeddings}, section)
    reading = Reading(reader, ropes, notes=tuple(dict.fromkeys(notes)), serving_length=served,
                      also_differs=sm.per_batch(main))
    return with_features(reading, sm.attention(features_of(config), text))


def section_for(rope: RopeParams, partial: float | None) -> dict[str, Any]:
    """The rope_parameters SGLang must be given for ``rope``: every key get_rope reads for its type spelled, so no
    key of the shipped section (merged into it) outlives it, and transformers' attention factor in SGLang's keys."""
    from ropectl.rope.frequencies import compute_frequencies
    from ropectl.schema.write import v5_parameters

    section = v5_parameters(rope, partial)
    attention = compute_frequencies(rope).attention_factor
    if rope.rope_type == "yarn":
        # multimodal YaRN takes no mscale keys (get_rope passes them on, and its class raises TypeError)
        unset = {"extrapolation_factor": 1.0, "truncate": True} if "mrope_section" in section else {
            "mscale": None, "mscale_all_dim": None, "extrapolation_factor": 1.0, "truncate": True}
        section = {**unset, **section}
        section["attn_factor"] = attention / _yarn_scale(section)
    elif rope.rope_type == "longrope":
        section.update(short_mscale=attention, long_mscale=attention)
    return section


def served_rope(rope: RopeParams, target: int) -> RopeParams:
    """What SGLang must be told: dynamic becomes plain RoPE with transformers' dynamic base at the target length."""
    if rope.rope_type != "dynamic":
        return rope
    from ropectl.readers.vllm import static_dynamic  # the formula is transformers', not vLLM's

    return static_dynamic(rope, target, rope.max_position_embeddings or rope.trained_context)


def overrides(rope: RopeParams, partial: float, target: int, path: tuple[str, ...] = ()) -> dict[str, Any]:
    """The ``--json-model-override-args`` value; ``path`` nests it where SGLang's text model reads."""
    out: dict[str, Any] = {"rope_parameters": section_for(served_rope(rope, target), partial if partial != 1.0 else None),
                           "max_position_embeddings": int(target)}
    for key in reversed(path):
        out = {key: out}
    return out


def command(model: str, args: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in [*COMMAND, "--model-path", model, *args])


def applied(config: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` as SGLang holds it after ``get_config`` applies ``override`` (see the module docstring)."""
    out = dict(config)
    for key, value in override.items():
        current = out.get(key)
        if key == "text_config" and isinstance(value, Mapping) and isinstance(current, Mapping):
            out[key] = applied_flat(current, value, merge=False)
        elif key == "rope_parameters" and isinstance(value, Mapping):
            out = applied_flat(out, {key: value}, merge=True)
        else:
            out[key] = value
    return out


def applied_flat(holder: Mapping[str, Any], value: Mapping[str, Any], merge: bool) -> dict[str, Any]:
    """A text config with ``value`` set: a rope section merged into the loaded one (top level) or replacing it (a
    sub-config's ``update``). transformers 5 loads a v4 ``rope_scaling`` and ``rope_theta`` into rope_parameters."""
    out = dict(holder)
    if "rope_parameters" in value:
        shipped = out.get("rope_parameters") or out.get("rope_scaling") or {}
        loaded = {"rope_theta": out.get("rope_theta"), **shipped} if isinstance(shipped, Mapping) else {}
        out.pop("rope_scaling", None)
        value = {**value, "rope_parameters": {**loaded, **value["rope_parameters"]} if merge else value["rope_parameters"]}
    return {**out, **value}


def emit(model: str, rope: RopeParams, layers: Mapping[str, RopeParams], partial: float, target: int,
         config: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``--emit sglang``: the launch line, refused where SGLang's get_rope cannot build what ropectl means."""
    from ropectl.errors import MethodError
    from ropectl.output import dumps
    from ropectl.readers.parity import rope_difference
    from ropectl.readers.vllm import override_path  # where a composite config's text model reads: the same key
    from ropectl.schema.layers import text_config

    reader = newest()
    if layers:
        raise MethodError("--emit sglang does not write per-layer-type rope sections (SGLang's reading of them is "
                          "not measured)", "serve the patched folder: ropectl patch MODEL -m METHOD -o DIR, then "
                          "python -m sglang.launch_server --model-path DIR")
    # the shipped multimodal layout stays: SGLang builds MRoPE from the section it is given
    shipped = text_config(config).get("rope_parameters") or text_config(config).get("rope_scaling") or {}
    mrope = {k: shipped[k] for k in ("mrope_section", "mrope_interleaved") if isinstance(shipped, Mapping) and k in shipped}
    rope = rope.with_(scaling={**mrope, **rope.scaling}) if mrope else rope
    built = _built(rope)
    if isinstance(built, str):  # what get_rope makes of the section itself (transformers may read it otherwise)
        raise MethodError(f"{reader.label} cannot serve this: {built}", next(
            (q.fix for q in reader.quirks if q.note in built), "pick another method"))
    override = overrides(rope, partial, target, override_path(config))
    reading = predict(reader, applied(config, override))
    if not reading.ok:
        raise MethodError(f"{reader.label} cannot serve this: {reading.error}", next(
            (q.fix for q in reader.quirks if q.note in reading.error), "pick another method"))
    args = ["--json-model-override-args", dumps(override, separators=(",", ":")), "--context-length", str(target)]
    warnings = []
    differs = rope_difference(reading.ropes, {"main": served_rope(rope, target)}, (None, target))
    if rope.rope_type == "dynamic":
        warnings.append(f"{reader.label}: {STATIC_DYNAMIC_NOTE}; this line serves the static equivalent for exactly "
                        f"{target} tokens, plain RoPE with theta {served_rope(rope, target).rope_theta:.6g}")
    if differs:
        warnings.append(f"{reader.label}: {'; '.join([differs, *reading.notes])}")
    return {"engine": "sglang", "versions": reader.versions.label, "json_model_override_args": override,
            "context_length": target, "args": args, "command": command(model, args)}, warnings


def emit_line(view: ServeView) -> tuple[dict[str, Any], list[str]]:
    """``--emit sglang``: ``python -m sglang.launch_server`` with ``--json-model-override-args``."""
    return emit(view.where, view.rope, view.layers, view.partial, view.target, view.config)
