"""Serving-engine flags for a patched RoPE: vLLM's ``--hf-overrides`` and llama.cpp's ``--rope-*``.

Both print only. What vLLM derives from the overrides (its serving length, its static reading of dynamic)
comes from the reader entries in ``ropectl.readers.vllm``: ``max_position_embeddings`` is always overridden,
to the value from which the newest vLLM derives exactly the target (trained length for linear, whose factor
vLLM multiplies in; the target for every other type; vLLM up to 0.29 takes yarn's length from the original instead, which
the overrides carry, so the same command serves the target there too).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from ropectl.errors import MethodError
from ropectl.families import GGUF_ARCHS
from ropectl.output import dumps, exact
from ropectl.readers import llama_cpp
from ropectl.readers import vllm as vllm_reader
from ropectl.readers.base import Reader
from ropectl.rope.params import RopeParams
from ropectl.schema.write import v5_parameters

DYNAMIC_STATIC = ("vLLM has no dynamic scaling (its 'dynamic' is static, and undefined past max_position_embeddings): "
                  "these overrides are the static equivalent for exactly {target} tokens, plain RoPE with "
                  "theta {theta:.6g} (transformers' dynamic base at that length); shorter prompts get the base of "
                  "the {target}-token length, not transformers' smaller one")


def _served_rope(rope: RopeParams, target: int) -> RopeParams:
    """What vLLM must be told: dynamic becomes its static equivalent at the target length."""
    if rope.rope_type != "dynamic":
        return rope
    return vllm_reader.static_dynamic(rope, target, rope.max_position_embeddings or rope.trained_context)


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
    reader = reader or vllm_reader.newest()
    part = partial if partial != 1.0 else None
    served = _served_rope(rope, target)
    section = (lambda p: _merge_proof(v5_parameters(p, part))) if path else (lambda p: v5_parameters(p, part))
    if layers:
        params: dict[str, Any] = {label: section(_served_rope(p, target)) for label, p in sorted(layers.items())}
    else:
        params = section(served)
    overrides: dict[str, Any] = {"rope_parameters": params,
                                 "max_position_embeddings": vllm_reader.max_positions_for(reader, model_type, served, target)}
    for key in reversed(path):
        overrides = {key: overrides}
    return overrides


def emit_vllm(model: str, rope: RopeParams, layers: Mapping[str, RopeParams], partial: float,
              target: int, model_type: str = "", path: tuple[str, ...] = ()) -> tuple[dict[str, Any], list[str]]:
    reader = vllm_reader.newest()
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


def _arch_for(model_type: str) -> str | None:
    return next((arch for arch, (mt, _) in GGUF_ARCHS.items() if mt == model_type), None)


def llama_cpp_args(rope: RopeParams, target: int, model_type: str) -> tuple[list[str], list[str]]:
    kind = rope.rope_type
    # llama3 and longrope survive conversion as tensors, for the architectures whose converter writes them
    fix = "use linear, ntk (--rope-freq-base) or yarn" + (
        ", or convert the patched checkpoint to GGUF (llama.cpp's converter writes it for Llama-family "
        "architectures)" if kind in llama_cpp.CONVERTER_CARRIES else "")
    llama_cpp.refuse_unexpressible(kind, kind, "expressed as llama.cpp flags", fix)
    flag = llama_cpp.FLAGS
    args = [flag["type"], "none" if kind == "default" else kind]
    if kind in ("linear", "yarn"):
        args += [flag["factor"], exact(rope.factor or 1.0)]
    args += [flag["theta"], exact(rope.rope_theta)]
    warnings: list[str] = []
    if kind == "yarn":
        sc = rope.scaling
        # Betas always go as flags: most architectures never read them from the GGUF (llama_cpp.YARN_BETA_ARCHS).
        args += [flag["original"], str(rope.original_max_position_embeddings),
                 flag["beta_fast"], exact(sc.get("beta_fast") or llama_cpp.DEFAULT_BETAS["beta_fast"]),
                 flag["beta_slow"], exact(sc.get("beta_slow") or llama_cpp.DEFAULT_BETAS["beta_slow"])]
        attn = llama_cpp.attn_factor(rope)
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
    carried = llama_cpp.converted_scaling(rope, converted_from) if converted_from is not None else None
    if carried:
        args = [llama_cpp.FLAGS["context"], str(target)]
        warnings = [f"no RoPE flag: llama.cpp's converter (convert_hf_to_gguf.py) writes this checkpoint's own "
                    f"{rope.rope_type} scaling into the GGUF as {carried}, which llama.cpp applies; no flag can set it",
                    *llama_cpp.converted_notes(rope, target)]
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
