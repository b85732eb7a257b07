"""How llama.cpp reads RoPE: the GGUF keys it takes per architecture, and the CLI flags that override them.

Measured on llama-cpp-python 0.3.36 (its bundled llama.cpp, built for the CPU) by tests/compat/test_llama_cpp.py
and by hand on SmolLM2 (docs/reference/compatibility.md):
- the YaRN ``beta_fast`` / ``beta_slow`` keys are read only by the architectures in ``YARN_BETA_ARCHS``; every
  other architecture (``llama`` included) uses 32 / 1 whatever the GGUF says, so only the flags set them;
- llama.cpp applies YaRN's attention factor 0.1 ln(s) + 1 itself, and ``--yarn-attn-factor`` alone is replaced by
  the GGUF's ``rope.scaling.attn_factor`` multiplier, so a non-default factor is passed with ``--override-kv``;
- a context (``-c``) above the GGUF's ``context_length`` (n_ctx_train) is accepted with a warning.

For a config.json, ``predict`` describes what llama.cpp computes after converting it to GGUF.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from ropectl.errors import MethodError
from ropectl.families import GGUF_ARCHS
from ropectl.output import exact
from ropectl.readers.base import DICT, FAILS, MAX_POS, TOP, Quirk, Reader, Reading, ServeView, VersionRange
from ropectl.readers.gguf_converter import CONVERTER_CARRIES, converted_notes, converted_scaling, converter_drops, drop_note
from ropectl.rope.methods import get_method, owner_of
from ropectl.rope.params import YARN_DEFAULT_BETAS, RopeParams

ENGINE = "llama.cpp"
SERVE_AS, SERVED_BY_DEFAULT = "llama.cpp", True  # recommend --serve-with
SERVES_GGUF = True  # a GGUF file reaches this engine only
IGNORES_BETAS = "ignores-yarn-betas"  # the GGUF's yarn beta keys are not read for this architecture
CONVERTER_DROPS = "converter-drops"  # convert_hf_to_gguf.py writes no such scaling for this architecture
MLA_LOGITS = "mla-logits"  # llama.cpp's deepseek2 graph scales the attention logits its own way
DEFAULT_BETAS = YARN_DEFAULT_BETAS  # what llama.cpp uses where it does not read the GGUF's betas
# Architectures whose loader reads {arch}.rope.scaling.yarn_beta_fast/slow (llama-model.cpp); others use defaults.
YARN_BETA_ARCHS = frozenset({"grok", "mistral3"})
# The flag for each RoPE setting (common/arg.cpp); the attention multiplier goes through --override-kv (above).
FLAGS = {"type": "--rope-scaling", "factor": "--rope-scale", "theta": "--rope-freq-base",
         "original": "--yarn-orig-ctx", "beta_fast": "--yarn-beta-fast", "beta_slow": "--yarn-beta-slow",
         "attn": "--yarn-attn-factor", "context": "-c", "override": "--override-kv"}
ATTN_NEEDS_OVERRIDE_KV = True
_READS = ("{arch}.rope.freq_base", "{arch}.rope.scaling.type", "{arch}.rope.scaling.factor",
          "{arch}.rope.scaling.original_context_length", "{arch}.rope.scaling.attn_factor", "{arch}.context_length")
_ORIGINAL = {"yarn": (TOP, DICT, MAX_POS)}

# Model types the converter turns into llama.cpp's deepseek2 graph (multi-head latent attention).
DEEPSEEK2_MODEL_TYPES = frozenset({"deepseek_v2", "deepseek_v3", "kimi_k2", "kimi_vl", "youtu"})
DEEPSEEK2_NOTE = ("llama.cpp's DeepSeek-2 graph (deepseek2.cpp) multiplies the attention logits by mscale^2, with "
                  "mscale from the scaling factor and rope.scaling.yarn_log_mul, for every scaled rope type; it "
                  "equals transformers only for yarn with mscale equal to mscale_all_dim, as DeepSeek ships it")
DEEPSEEK2_FIX = "patch with yarn and --mscale 1 --mscale-all-dim 1 (DeepSeek's own form)"


def deepseek2_logit_scale(p: RopeParams) -> float:
    """llama.cpp's deepseek2 attention-logit multiplier over transformers' for ``p`` (1.0: the same).

    llama.cpp (llama-context.cpp, deepseek2.cpp): with s the factor and L = mscale_all_dim (yarn_log_mul), the
    cos/sin factor is R = mscale(s, m)/mscale(s, L) where L is set, with m taken as L (1 when L is 1, L itself
    otherwise), so R = 1; else R = mscale(s). The logits are then scaled by (R mscale(s, L))^2 on top.
    transformers: cos/sin factor A
    (mscale(s, m)/mscale(s, L) when both are set, else mscale(s), or the explicit attention_factor) and logits
    times mscale(s, L)^2 when L is set. Linear: llama.cpp scales logits by mscale(s)^2, transformers not at all.
    """
    from ropectl.rope.frequencies import compute_frequencies, yarn_mscale

    s = float(p.factor or 1.0)
    if p.rope_type not in ("linear", "yarn") or s <= 1:
        return 1.0
    if p.rope_type == "linear":
        return yarn_mscale(s) ** 2
    all_dim = float(p.scaling.get("mscale_all_dim") or 0.0)
    rope = 1.0 if all_dim else yarn_mscale(s)
    llama_cpp = rope ** 2 * (rope * yarn_mscale(s, all_dim)) ** 2
    hf_attention = compute_frequencies(p).attention_factor
    transformers = hf_attention ** 2 * (yarn_mscale(s, all_dim) ** 2 if all_dim else 1.0)
    return llama_cpp / transformers


READERS: tuple[Reader, ...] = (
    Reader(ENGINE, VersionRange("0.3.36"), _READS, ("{arch}.rope.scaling.yarn_beta_fast (most archs)",),
           _ORIGINAL, {}, "none enforced: -c above context_length (n_ctx_train) only warns", (
               Quirk(FAILS, "has no dynamic NTK scaling", rope_types=frozenset({"dynamic"}),
                     fix=get_method("dynamic").gguf_fix),
               Quirk(IGNORES_BETAS, "reads YaRN beta_fast/beta_slow from the GGUF only for "
                     f"{', '.join(sorted(YARN_BETA_ARCHS))}; other architectures use 32/1",
                     rope_types=frozenset({"yarn"}),
                     fix="pass --yarn-beta-fast/--yarn-beta-slow (`ropectl patch ... --emit llama.cpp` prints them)"),
               Quirk(CONVERTER_DROPS, drop_note("llama3"), rope_types=frozenset({"llama3"}),
                     fix="use yarn, which the converter writes for every architecture"),
               Quirk(CONVERTER_DROPS, drop_note("longrope"), rope_types=frozenset({"longrope"}),
                     fix="use yarn, which the converter writes for every architecture"),
               Quirk(MLA_LOGITS, DEEPSEEK2_NOTE, model_types=DEEPSEEK2_MODEL_TYPES,
                     rope_types=frozenset({"linear", "yarn"}), fix=DEEPSEEK2_FIX),
           ), ("llama-cpp-python 0.3.36",)),
)


def cannot_serve(rope_type: str) -> str | None:
    """Why llama.cpp cannot run ``rope_type`` at all (e.g. dynamic NTK), or None."""
    for quirk in READERS[-1].quirks:
        if quirk.kind == FAILS and rope_type in quirk.rope_types:
            return f"llama.cpp {quirk.note} ({quirk.fix})"
    return None


def reads_betas(arch: str) -> bool:
    return arch in YARN_BETA_ARCHS


def ignored_betas(arch: str, scaling: Mapping[str, Any]) -> dict[str, float]:
    """The non-default YaRN betas that a GGUF of ``arch`` carries but llama.cpp will not read."""
    if reads_betas(arch):
        return {}
    return {k: float(scaling[k]) for k, d in DEFAULT_BETAS.items()
            if scaling.get(k) is not None and abs(float(scaling[k]) - d) > 1e-12}


def predict(reader: Reader, config: Mapping[str, Any], version: str | None = None) -> Reading:
    """What llama.cpp computes for ``config`` once converted to GGUF (betas as it reads them)."""
    from ropectl.readers import transformers as tf
    from ropectl.schema.layers import text_config

    base = tf.predict(tf.READERS[-1], config)  # the converter reads config.json as transformers 5 does
    if not base.ok:
        return Reading(reader, error=base.error, notes=base.notes)
    text = text_config(config)
    model_type = str(text.get("model_type") or "")
    architecture = next(iter(config.get("architectures") or text.get("architectures") or [""]), "")
    ropes, notes, logit_scale = {}, list(base.notes), 1.0
    for layer, p in base.ropes.items():
        for quirk in reader.quirks_for(model_type, p.rope_type):
            if quirk.kind == FAILS:
                return Reading(reader, error=quirk.note, notes=tuple(notes))
            # The converter keeps these model types' names as their GGUF architecture, so YARN_BETA_ARCHS applies.
            if quirk.kind == IGNORES_BETAS and not reads_betas(model_type) and ignored_betas("", p.scaling):
                p = p.with_(scaling={**p.scaling, **DEFAULT_BETAS})
                notes.append(quirk.note)
        dropped = converter_drops(p.rope_type, architecture)
        if dropped:
            notes.append(dropped)
            p = p.with_(rope_type="default", scaling={})
        if model_type in DEEPSEEK2_MODEL_TYPES and abs(deepseek2_logit_scale(p) - 1.0) > 1e-6:
            logit_scale = deepseek2_logit_scale(p)
            notes.append(DEEPSEEK2_NOTE)
        ropes[layer] = p
    reading = Reading(reader, ropes, notes=tuple(dict.fromkeys(notes)), serving_length=None, logit_scale=logit_scale,
                      also_differs=_longrope_per_context(ropes))
    from ropectl.readers.features import features_of, with_features

    return with_features(reading, attention(features_of(config), model_type, base.ropes))


def _longrope_per_context(ropes: Mapping[str, RopeParams]) -> str | None:
    """llama-model.cpp get_rope_factors: the LongRoPE list is chosen per context (n_ctx per sequence against the
    original length), not per prompt length as transformers does."""
    rope = next(iter(ropes.values()), None)
    if rope is None or rope.rope_type != "longrope" or not rope.original_max_position_embeddings:
        return None
    sc, original = rope.scaling, rope.original_max_position_embeddings
    if list(sc.get("long_factor") or ()) == list(sc.get("short_factor") or ()):
        return None
    return (f"computes other RoPE once its context (-c per sequence) exceeds {original:,}: long_factor at every "
            f"position, prompts shorter than {original:,} included (get_rope_factors in llama-model.cpp), where "
            f"transformers uses short_factor up to {original:,}")


# Llama 4 in llama.cpp (src/models/llama4.cpp, llama-hparams.h): unless the GGUF says sliding_window 0, chunked
# attention at 8192, the NoPE step 4 and the temperature floor 8192 / scale 0.1 / offset 1 are fixed, not converted.
LLAMA4_FIXED = {"chunk": 8192, "nope_every": 4, "floor": 8192, "scale": 0.1}


def attention(f: Any, model_type: str, ropes: Mapping[str, RopeParams]) -> Any:
    """What llama.cpp (after convert_hf_to_gguf.py) does with the attention features (``readers.features``)."""
    from ropectl.readers.features import FeatureReading, as_configured, no_dca

    notes, differs, error = as_configured(f), None, None
    if f.dual_chunk:
        notes.insert(0, no_dca(ENGINE, f) + " (the converter writes max_position_embeddings as context_length)")
    if model_type.startswith("llama4") and (f.nope_layers or f.chunked_layers):
        fixed = LLAMA4_FIXED
        t = f.temperature
        own = (f.chunk == fixed["chunk"] and f.nope_layers == tuple(i for i in range(f.layers) if (i + 1) % 4 == 0)
               and (t is None or (t.floor, t.scale) == (fixed["floor"], fixed["scale"])))
        if not own:
            differs = ("fixes Llama 4's chunk (8,192), NoPE layers (every 4th) and temperature (floor 8,192, scale 0.1) "
                       "in src/models/llama4.cpp, and this config names others")
    if f.temperature and f.temperature.layers == "every layer":
        main = next(iter(ropes.values()), None)
        if main is not None and main.rope_type != "yarn":  # conversion/mistral3.py asserts it
            error = ("llama.cpp's converter (conversion/mistral3.py) asserts ministral3's rope_type is 'yarn', and "
                     f"this one is '{main.rope_type}': convert_hf_to_gguf.py raises AssertionError")
    return FeatureReading(tuple(notes), differs, error)


def attn_factor(rope: RopeParams) -> float:
    """The multiplier llama.cpp needs so its YaRN cos/sin scale equals transformers' attention factor."""
    from ropectl.rope.methods.yarn import gguf_attn_factor

    return gguf_attn_factor(rope)


def gguf_warnings(arch: str, rope: RopeParams) -> list[str]:
    """Keys this GGUF carries that llama.cpp will not read for its architecture (reader data)."""
    ignored = ignored_betas(arch, rope.scaling) if rope.rope_type == "yarn" else {}
    if not ignored:
        return []
    flags = " ".join(f"{FLAGS[k]} {v:g}" for k, v in ignored.items())
    return [f"{READERS[-1].label}: reads the YaRN betas from the GGUF only for "
            f"{', '.join(sorted(YARN_BETA_ARCHS))}, so for '{arch}' it uses 32/1; pass {flags}"]


def refuse_unexpressible(rope_type: str, label: str, form: str, fix: str) -> None:
    """The one refusal of a method llama.cpp keeps only in converted tensors or not at all (``gguf_none``): patching
    a GGUF's metadata (``form`` "written to GGUF metadata") and printing flags ("expressed as llama.cpp flags")."""
    owner = owner_of(rope_type)
    if owner is not None and owner.gguf_none:
        raise MethodError(f"method '{label}' cannot be {form}: {owner.gguf_none}", fix)


def emit_line(view: ServeView) -> tuple[dict[str, Any], list[str]]:
    """``--emit llama.cpp``: ``llama-server`` with the ``--rope-*`` flags."""
    return emit_llama_cpp(view.where, view.rope, view.layers, view.model_type, view.target,
                          converted_from=view.config if view.kept else None)


def _arch_for(model_type: str) -> str | None:
    return next((arch for arch, (mt, _) in GGUF_ARCHS.items() if mt == model_type), None)


def llama_cpp_args(rope: RopeParams, target: int, model_type: str) -> tuple[list[str], list[str]]:
    kind = rope.rope_type
    # llama3 and longrope survive conversion as tensors, for the architectures whose converter writes them
    fix = "use linear, ntk (--rope-freq-base) or yarn" + (
        ", or convert the patched checkpoint to GGUF (llama.cpp's converter writes it for Llama-family "
        "architectures)" if kind in CONVERTER_CARRIES else "")
    refuse_unexpressible(kind, kind, "expressed as llama.cpp flags", fix)
    flag = FLAGS
    args = [flag["type"], "none" if kind == "default" else kind]
    if kind in ("linear", "yarn"):
        args += [flag["factor"], exact(rope.factor or 1.0)]
    args += [flag["theta"], exact(rope.rope_theta)]
    warnings: list[str] = []
    if kind == "yarn":
        sc = rope.scaling
        # Betas always go as flags: most architectures never read them from the GGUF (YARN_BETA_ARCHS).
        args += [flag["original"], str(rope.original_max_position_embeddings),
                 flag["beta_fast"], exact(sc.get("beta_fast") or DEFAULT_BETAS["beta_fast"]),
                 flag["beta_slow"], exact(sc.get("beta_slow") or DEFAULT_BETAS["beta_slow"])]
        attn = attn_factor(rope)
        arch = _arch_for(model_type)
        if abs(attn - 1.0) > 1e-7 and arch:
            # llama.cpp recomputes YaRN's factor itself, replacing --yarn-attn-factor, then multiplies in this
            # GGUF key: the override is the one way to set it from the command line.
            import gguf  # lazily, as everywhere: only GGUF work needs it

            args += [flag["override"], f"{gguf.Keys.Rope.SCALING_ATTN_FACTOR.format(arch=arch)}=float:{exact(attn)}"]
        if sc.get("truncate") is False:
            warnings.append("llama.cpp always rounds the YaRN ramp ends; truncate=false is not expressible there")
    # The context: above the GGUF's context_length (n_ctx_train) llama.cpp only warns.
    args += [flag["context"], str(target)]
    return args, warnings


def emit_llama_cpp(model: str, rope: RopeParams, layers: Mapping[str, RopeParams], model_type: str,
                   target: int, converted_from: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], list[str]]:
    """``converted_from``: the checkpoint's config when the line serves it as it ships (no -m), whose llama3 or
    LongRoPE scaling the converter writes as tensors: the line then sets only the context."""
    carried = converted_scaling(rope, converted_from) if converted_from is not None else None
    if carried:
        args = [FLAGS["context"], str(target)]
        warnings = [f"no RoPE flag: llama.cpp's converter (convert_hf_to_gguf.py) writes this checkpoint's own "
                    f"{rope.rope_type} scaling into the GGUF as {carried}, which llama.cpp applies; no flag can set it",
                    *converted_notes(rope, target)]
    else:
        args, warnings = llama_cpp_args(rope, target, model_type)
    if layers:
        warnings.append("these flags set the full-attention RoPE; sliding-window layers keep the GGUF's own base")
    if not model.lower().endswith(".gguf"):
        # llama.cpp loads only GGUF: printing the HF folder after -m would give a command that cannot start.
        warnings.append(f"llama.cpp loads GGUF files, not the Hugging Face checkpoint '{model}': convert it with "
                        "llama.cpp's convert_hf_to_gguf.py and put that file in place of MODEL.gguf")
        model = "MODEL.gguf"
    command = "llama-server -m " + " ".join(shlex.quote(a) for a in [model, *args])
    return {"engine": "llama.cpp", "args": args, "command": command}, warnings
