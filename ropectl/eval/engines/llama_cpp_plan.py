"""What the llama.cpp engine will ask llama.cpp for, decided before any weight loads (no llama_cpp import here).

Per method, the RoPE is exactly what ``ropectl patch MODEL.gguf [-m METHOD] --emit llama.cpp`` prints (the same
code, ``readers.llama_cpp.emit_llama_cpp``): the printed flags are read back into the fields of llama.cpp's
``llama_context_params`` they set (``--rope-scaling`` -> rope_scaling_type, ``--rope-scale S`` -> rope_freq_scale
1/S as common/arg.cpp does, ...) and ``--override-kv`` into the model's ``kv_overrides``; every other field keeps
llama.cpp's own default (``llama_context_default_params``), as ``llama-server`` with that line would.

The context length: the printed ``-c`` or the longest prompt scored, whichever is longer. For the methods llama.cpp
serves from flags the RoPE does not depend on it (``n_ctx_orig_yarn`` comes from ``--yarn-orig-ctx``); a GGUF's own
LongRoPE factors do (llama.cpp picks one list per context), which is why the printed value is kept as the floor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ropectl.errors import CheckpointError, EngineError, MethodError, UsageError
from ropectl.runtime.model import MethodState, ModelSource

PIN = "llama-cpp-python==0.3.36"
EXTRA = f"pip install 'ropectl[llama-cpp]' (or: pip install {PIN}; it builds llama.cpp from source, minutes)"
# --emit llama.cpp flag -> (llama_context_params field, type); --rope-scale and --override-kv are read apart.
CONTEXT_FIELDS = {"--rope-scaling": ("rope_scaling_type", str), "--rope-freq-base": ("rope_freq_base", float),
                  "--yarn-orig-ctx": ("yarn_orig_ctx", int), "--yarn-beta-fast": ("yarn_beta_fast", float),
                  "--yarn-beta-slow": ("yarn_beta_slow", float), "--yarn-attn-factor": ("yarn_attn_factor", float),
                  "-c": ("n_ctx", int)}
KV_TYPES = {"float": float, "int": int, "bool": lambda v: v.lower() == "true", "str": str}


def missing_llama_cpp(detail: str = "") -> EngineError:
    why = f" ({detail})" if detail else ""
    return EngineError(f"--engine llama.cpp needs llama-cpp-python, which is not importable here{why}",
                       f"{EXTRA}, or use --engine transformers")


def check_source(source: ModelSource) -> None:
    """llama.cpp loads GGUF files only: a Hugging Face folder is refused with the conversion that makes one."""
    if not source.resolved.is_gguf:
        raise CheckpointError(f"--engine llama.cpp loads a GGUF file, not the Hugging Face checkpoint "
                              f"'{source.resolved.path}'",
                              "convert it with llama.cpp's convert_hf_to_gguf.py (python convert_hf_to_gguf.py "
                              "FOLDER --outfile MODEL.gguf) and pass the .gguf, or use --engine transformers")


@dataclass(frozen=True)
class Setting:
    """One method as llama.cpp runs it: the printed line and the parameters read from it."""

    label: str
    args: tuple[str, ...]  # what `patch --emit llama.cpp` prints after -m MODEL
    command: str
    context: Mapping[str, Any]  # llama_context_params fields the flags set (rope_scaling_type by name)
    kv_overrides: Mapping[str, Any] = field(default_factory=dict)  # model parameters (need the model loaded so)
    printed_ctx: int = 0
    notes: tuple[str, ...] = ()  # what patch prints beside the line (e.g. sliding-window layers keep their base)

    @property
    def model_key(self) -> tuple[tuple[str, Any], ...]:
        """Settings with equal keys share one loaded llama_model."""
        return tuple(sorted(self.kv_overrides.items()))

    def to_dict(self) -> dict[str, Any]:
        return {"args": list(self.args), "command": self.command, "context": dict(self.context),
                "kv_overrides": dict(self.kv_overrides)}


def flag_params(args: tuple[str, ...] | list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(llama_context_params fields, kv_overrides) that the printed flags set, as llama.cpp's arg parser sets them."""
    context: dict[str, Any] = {}
    overrides: dict[str, Any] = {}
    if len(args) % 2:
        raise EngineError(f"the llama.cpp line has an odd flag list {list(args)}", "report it: a ropectl bug")
    for flag, value in zip(args[::2], args[1::2]):
        if flag == "--rope-scale":  # common/arg.cpp: params.rope_freq_scale = 1.0f / value
            context["rope_freq_scale"] = 1.0 / float(value)
        elif flag == "--override-kv":
            key, typed = value.split("=", 1)
            kind, raw = typed.split(":", 1)
            overrides[key] = KV_TYPES[kind](raw)
        elif flag in CONTEXT_FIELDS:
            name, cast = CONTEXT_FIELDS[flag]
            context[name] = cast(value)
        else:
            raise EngineError(f"the llama.cpp engine does not read the printed flag '{flag}'",
                              "report it: `patch --emit llama.cpp` and the engine disagree")
    return context, overrides


def own_setting(label: str, args: str, path: str) -> Setting:
    """The user's own llama.cpp flags (``--serve llama.cpp=ARGS``), applied verbatim: ``-m`` and ``-c`` as given,
    every RoPE flag the engine reads; another flag is refused with the ones it takes."""
    import shlex

    try:
        words = shlex.split(args)
    except ValueError as exc:
        raise UsageError(f"--serve llama.cpp='{args}' does not parse as shell words ({exc})",
                         "quote it as a shell would") from None
    if "-m" in words[:-1]:  # the file is --gguf's or MODEL's
        at = words.index("-m")
        words = words[:at] + words[at + 2:]
    try:
        context, overrides = flag_params(words)
    except (EngineError, ValueError, KeyError) as exc:
        why = exc.problem if isinstance(exc, EngineError) else f"{type(exc).__name__}: {exc}"
        takes = ", ".join([*CONTEXT_FIELDS, "--rope-scale", "--override-kv"])
        raise UsageError(f"--serve llama.cpp='{args}': {why}", f"pass the flags llama-server takes for RoPE: {takes}") from None
    command = "llama-server -m " + " ".join(shlex.quote(a) for a in [path, *words])
    return Setting(label, tuple(words), command, context, overrides, int(context.get("n_ctx", 0)))


def check_serves(state: MethodState) -> None:
    """One line for a method llama.cpp has no form of (dynamic NTK), per the llama.cpp reader."""
    from ropectl.readers.llama_cpp import cannot_serve

    for rope in state.ropes.values():
        why = cannot_serve(rope.rope_type)
        if why:
            raise MethodError(f"llama.cpp cannot run method '{state.label}': {why}",
                              "drop it from --method, or evaluate it with --engine transformers")


def setting_for(state: MethodState, source: ModelSource, trained: int | None) -> Setting:
    """What ``patch MODEL.gguf [-m METHOD] --emit llama.cpp`` prints for ``state``, read into parameters."""
    from ropectl.eval.engines.vllm_plan import patch_target
    from ropectl.readers.llama_cpp import emit_llama_cpp
    from ropectl.schema.read import read_model_rope

    check_serves(state)
    model = read_model_rope(state.config)
    target = patch_target(state, trained) or int(state.rope.max_position_embeddings or 0)
    # the checkpoint as it ships (no -m): a GGUF's own llama3/LongRoPE tensors are what llama.cpp applies
    shipped = source.config if state.spec is None else None
    try:
        emitted, notes = emit_llama_cpp(str(source.resolved.path), model.rope, model.layer_ropes, model.model_type,
                                    target, converted_from=shipped)
    except MethodError as exc:  # llama3 / longrope as flags: patch's own refusal, named for this engine
        raise MethodError(f"llama.cpp cannot run method '{state.label}' from flags: {exc.problem}",
                          exc.fix or "evaluate it with --engine transformers") from None
    args = tuple(emitted["args"])
    context, overrides = flag_params(args)
    return Setting(state.label, args, emitted["command"], context, overrides, int(context.get("n_ctx", 0)),
                   tuple(notes))


def expected_rope(state: MethodState) -> tuple[float, float]:
    """(freq_base, freq_scale) the context must report for ``state``: ropectl's own RoPE, not the flags. llama.cpp's
    freq_scale is 1 / the scaling factor its GGUF metadata carries (rope.scaling.factor), which the method's own
    record says it writes (``Method.gguf_keys``); a method that writes none leaves it at 1."""
    from ropectl.rope.methods import method_of_type

    rope = state.rope
    method = method_of_type(rope.rope_type)
    keys = method.gguf_keys(rope) if method is not None and method.gguf_keys is not None else {}
    factor = keys.get("SCALING_FACTOR")
    return float(rope.rope_theta), 1.0 / float(factor) if factor else 1.0
