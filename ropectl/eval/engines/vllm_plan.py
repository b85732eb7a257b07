"""What the vLLM engine will ask vLLM for, decided before any weight loads: per method and length, the
``--hf-overrides`` and ``--max-model-len`` that ``ropectl patch --emit vllm`` prints (``engines.emit``, the same
code), the methods vLLM cannot build, and the parallel settings it cannot run.

- A static method (none, linear, ntk, yarn, llama3) gets one override set for the whole sweep: what
  ``patch -m METHOD --emit vllm`` prints for its target (trained x factor), or for the sweep's longest length where
  that is longer (the same RoPE; only max_position_embeddings and --max-model-len grow).
- dynamic has no vLLM form (vLLM's "dynamic" is one static base): a cell of L tokens runs what the printed command
  gives for a target of L, labelled "dynamic (vLLM: static at L)": transformers' dynamic base for a forward of L
  tokens, so the cells equal transformers' (and within the trained context, the unscaled model's).
- longrope: the printed overrides for its own max_position_embeddings (or the cell's length, where longer), from
  which vLLM takes its attention scaling as transformers does; vLLM picks the short or long factors per engine from
  --max-model-len (long above the original length), so cells up to the original length run with --max-model-len
  at the original length (short factors, as transformers at those lengths), longer ones with the printed one.
  Past its max_position_embeddings the printed value grows, and vLLM's scaling with it (transformers keeps the
  configured one): a forward past it differs (in truncate mode also the shorter long-factor cells it scores), and
  the run warns.

Every engine runs its --max-model-len as planned, with no position past it: vLLM takes a prompt only below
--max-model-len (it keeps a position for the token it samples), so the engine scores a prompt's last token as
that sampled token (``VllmEngine._prompt_logprobs``). eval-tasks' greedy generation stays within a trial's length
(ruler.score).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ropectl.errors import MethodError, UsageError
from ropectl.output import dumps
from ropectl.runtime.model import MethodState

EXTRA = "pip install 'ropectl[vllm]'"
BACKENDS = ("mp", "ray", "uni", "external_launcher")


@dataclass(frozen=True)
class Serving:
    """One vLLM engine: the overrides and max length it starts with, and the lengths it scores."""

    hf_overrides: Mapping[str, Any]
    printed_max_model_len: int  # what `patch --emit vllm` prints
    served_as: str  # how the results name what vLLM ran, e.g. "dynamic (vLLM: static at 1024)"
    max_model_len: int  # what the engine passes: the printed length (longrope's short factors: the original one)

    @property
    def key(self) -> str:
        return dumps({"hf_overrides": self.hf_overrides, "max_model_len": self.max_model_len}, sort_keys=True)

    def command(self, model: str) -> str:
        """The ``vllm serve`` line of this engine."""
        import shlex

        line = ["vllm", "serve", model, "--hf-overrides", dumps(dict(self.hf_overrides))]
        return " ".join(shlex.quote(w) for w in [*line, *(["--max-model-len", str(self.max_model_len)]
                                                          if self.max_model_len else [])])

    def to_dict(self) -> dict[str, Any]:
        return {"hf_overrides": self.hf_overrides, "printed_max_model_len": self.printed_max_model_len,
                "max_model_len": self.max_model_len, "served_as": self.served_as}


@dataclass(frozen=True)
class Parallel:
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    distributed_executor_backend: str | None = None

    def kwargs(self) -> dict[str, Any]:
        out: dict[str, Any] = {"tensor_parallel_size": self.tensor_parallel_size,
                               "pipeline_parallel_size": self.pipeline_parallel_size}
        if self.distributed_executor_backend:
            out["distributed_executor_backend"] = self.distributed_executor_backend
        return out


def parallel_from(spec: Any) -> Parallel:
    tp, pp = int(getattr(spec, "tensor_parallel_size", 1) or 1), int(getattr(spec, "pipeline_parallel_size", 1) or 1)
    backend = getattr(spec, "distributed_executor_backend", None)
    if tp < 1 or pp < 1:
        raise UsageError(f"--tensor-parallel-size and --pipeline-parallel-size must be at least 1, got {tp} and {pp}",
                         "pass e.g. --tensor-parallel-size 2")
    if backend is not None and backend not in BACKENDS:
        raise UsageError(f"unknown --distributed-executor-backend '{backend}'", f"use one of: {', '.join(BACKENDS)}")
    return Parallel(tp, pp, backend)


def check_heads(config: Mapping[str, Any], parallel: Parallel) -> None:
    """vLLM splits attention heads across the tensor-parallel ranks: the size must divide them."""
    from ropectl.schema.layers import text_config

    cfg = text_config(config)
    tp = parallel.tensor_parallel_size
    heads = int(cfg.get("num_attention_heads") or 0)
    kv = int(cfg.get("num_key_value_heads") or heads)
    if heads and heads % tp:
        raise UsageError(f"--tensor-parallel-size {tp} does not divide the model's {heads} attention heads",
                         f"use a size that divides {heads} (e.g. {_divisors(heads)})")
    if kv and kv % tp and tp % kv:  # vLLM replicates KV heads when tp is a multiple of their count
        raise UsageError(f"--tensor-parallel-size {tp} neither divides nor is a multiple of the model's {kv} "
                         "key/value heads", f"use a size that divides {kv} or is a multiple of it")


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0 and d <= 8)


def check_mode(spec: Any) -> None:
    if getattr(spec, "device_map", None):
        raise UsageError("--device-map is a transformers option; vLLM places the model itself",
                         "drop --device-map and use --tensor-parallel-size / --pipeline-parallel-size")


def patch_target(state: MethodState, trained: int | None) -> int | None:
    """The target ``ropectl patch -m METHOD --emit vllm`` prints for this method (trained x factor)."""
    factor = state.spec.factor if state.spec is not None else None
    if trained is None:
        return state.rope.max_position_embeddings
    return int(round(trained * factor)) if factor else int(trained)


def serving_for(state: MethodState, config: Mapping[str, Any], length: int, longest: int,
                trained: int | None) -> Serving:
    """The engine that scores ``state`` at ``length`` (prompts of ``length`` tokens)."""
    from ropectl.readers import vllm as reader_mod
    from ropectl.readers.vllm import emit_vllm
    from ropectl.schema.read import read_model_rope

    model = read_model_rope(state.config)
    original, served_len = state.rope.original_max_position_embeddings, None
    static_in_vllm = reader_mod.cannot_serve(state.rope.rope_type) is not None  # dynamic: one base per engine
    if state.length_dependent and not static_in_vllm and original:
        # longrope: vLLM's attention scaling comes from max_position_embeddings / original (transformers': the
        # configured one at every length), its factors from --max-model-len: short ones up to the original length
        target = max(state.rope.max_position_embeddings or 0, length)
        served_len = original if length <= original else target
        which = "short" if length <= original else "long"
        served_as = f"{state.rope.rope_type} (vLLM: {which} factors at {served_len})"
    elif state.length_dependent:
        target = length
        served_as = f"{state.rope.rope_type} (vLLM: static at {target})"
    else:
        target = max(patch_target(state, trained) or 0, longest)
        served_as = state.label
    emitted, _ = emit_vllm("MODEL", model.rope, model.layer_ropes, model.partial_rotary_factor, target,
                           model.model_type, reader_mod.override_path(config))
    printed = int(emitted["max_model_len"])
    return Serving(emitted["hf_overrides"], printed, served_as, served_len or printed)


def shipped_serving(state: MethodState, config: Mapping[str, Any], target: int) -> Serving:
    """What ``patch MODEL --emit vllm`` prints for the checkpoint as it ships, for ``target``: one engine that serves
    every length up to it (a length-dependent method included: vLLM fixes it per engine, which verify measures)."""
    from ropectl.readers import vllm as reader_mod
    from ropectl.readers.vllm import emit_vllm
    from ropectl.schema.read import read_model_rope

    model = read_model_rope(state.config)
    emitted, _ = emit_vllm("MODEL", model.rope, model.layer_ropes, model.partial_rotary_factor, target,
                           model.model_type, reader_mod.override_path(config))
    printed = int(emitted["max_model_len"])
    return Serving(emitted["hf_overrides"], printed, state.label, printed)


def own_serving(args: str, label: str) -> Serving:
    """The user's own ``vllm serve`` flags (``--serve vllm=ARGS``), verbatim: ``--hf-overrides JSON`` and
    ``--max-model-len N`` (``=`` forms too); any other flag is refused, naming the two it takes."""
    import json
    import shlex

    fix = "pass --serve vllm=\"--hf-overrides '{...}' --max-model-len N\" (the two flags verify runs vLLM with)"
    try:
        words = [part for word in shlex.split(args) for part in (word.split("=", 1) if word.startswith("--") else [word])]
    except ValueError as exc:
        raise UsageError(f"--serve vllm='{args}' does not parse as shell words ({exc})", fix) from None
    values = dict(zip(words[::2], words[1::2]))
    unknown = sorted(set(values) - {"--hf-overrides", "--max-model-len"})
    if len(words) % 2:
        unknown.append("a value without its flag")
    if unknown:
        raise UsageError(f"--serve vllm: verify does not run vLLM with {', '.join(unknown)}", fix)
    try:
        overrides = json.loads(values.get("--hf-overrides", "{}"))
        length = int(values["--max-model-len"]) if "--max-model-len" in values else 0
    except (ValueError, json.JSONDecodeError) as exc:
        raise UsageError(f"--serve vllm='{args}': {type(exc).__name__}: {exc}", fix) from None
    if not isinstance(overrides, dict):
        raise UsageError(f"--serve vllm: --hf-overrides is a JSON {type(overrides).__name__}, not an object", fix)
    return Serving(overrides, length, f"{label} (your --serve flags)", length)


def check_builds(serving: Serving, config: Mapping[str, Any], label: str) -> None:
    """The newest vLLM reader's prediction of the overridden config: a method its model code cannot build is refused."""
    from ropectl.readers import vllm as reader_mod

    reading = reader_mod.predict(reader_mod.newest(), overridden(config, serving.hf_overrides))
    if not reading.ok:
        raise MethodError(f"vLLM cannot run method '{label}' on this model: {reading.error}",
                          "drop it from --method, or evaluate it with --engine transformers")


def overridden(config: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """config.json as vLLM sees it after ``--hf-overrides``: dict values merged key by key, others replaced."""
    out = dict(config)
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = overridden(out[key], value)
        else:
            out[key] = value
    return out


def plan_servings(states: list[MethodState], config: Mapping[str, Any], lengths: tuple[int, ...],
                  trained: int | None) -> dict[tuple[str, int], Serving]:
    """(method label, length) -> its Serving, every one checked; raises before any weight loads."""
    longest = max(lengths)
    out: dict[tuple[str, int], Serving] = {}
    for state in states:
        for length in lengths:
            serving = serving_for(state, config, length, longest, trained)
            check_builds(serving, config, state.label)
            out[(state.label, length)] = serving
    return out


def served_notes(states: list[MethodState], servings: Mapping[tuple[str, int], Serving]) -> list[str]:
    """One warning per method that vLLM runs otherwise than transformers evaluates it (dynamic: static)."""
    from ropectl.readers.vllm import cannot_serve

    notes = []
    for state in states:
        served = [(n, s) for (label, n), s in sorted(servings.items()) if label == state.label]
        if not (state.length_dependent and served):
            continue
        runs = ", ".join(f"{n} as {s.served_as.split('(vLLM: ', 1)[-1].rstrip(')')}" for n, s in served)
        if cannot_serve(state.rope.rope_type):
            notes.append(f"{state.label}: vLLM has no {state.rope.rope_type} scaling; each length runs the overrides "
                         f"`patch --emit vllm` prints for it ({runs})")
        else:  # longrope: vLLM picks the long factors when --max-model-len exceeds the original length
            notes.append(f"{state.label}: vLLM fixes its {state.rope.rope_type} factors per engine from "
                         f"--max-model-len; each length runs the printed overrides with the --max-model-len that "
                         f"picks transformers' factors for it ({runs})")
            configured = int(state.rope.max_position_embeddings or 0)
            if any(s.printed_max_model_len > configured for _, s in served):
                notes.append(f"{state.label}: past max_position_embeddings {configured} the overrides raise it, and "
                             "vLLM's LongRoPE attention scaling with it (sqrt(1 + ln(s) / ln(original)), s = "
                             "max_position_embeddings / original; transformers keeps the configured one): cells "
                             "scored in a forward past it differ from transformers'")
    return notes
