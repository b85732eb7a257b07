"""What a verify run will do, decided before any weight loads: the engines (names checked), the lengths, and the
token ids every engine scores.

Lengths: the trained context and the target, plus where a length-dependent rule bites, which the method's own
record states (``Method.rule_lengths``: longrope's original length and one past it, dynamic's length other than
the served maximum). Token ids: the first ``samples`` documents of the corpus that hold the longest length, each
tokenized once by the reference's tokenizer (no token cache is written: verify writes only under --out).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ropectl.errors import DataError, UsageError
from ropectl.verify.spec import VerifySpec

REFERENCE = "transformers"
# Engines verify checks without their forward: SGLang's does not run on a CPU, so its row reads SGLang's own
# config and rotary code (``rotary``) from its venv.
ROTARY_ONLY = ("sglang",)


@dataclass(frozen=True, kw_only=True)
class Plan:
    engines: tuple[str, ...]  # registry names, the reference first
    trained: int
    target: int
    lengths: tuple[int, ...]
    dtype: str
    device: str


def engine_list(spec: VerifySpec) -> tuple[str, ...]:
    """The engines asked for, by registry name, the reference first; an unknown name, or a --serve /
    --engine-python for an engine not asked for, is refused."""
    from ropectl.eval.engines import engine_name, engine_names

    known = [*engine_names(), *ROTARY_ONLY]
    names = [engine_name(n.strip()) for n in spec.engines if n.strip()]
    for name in names:
        if name not in known:
            raise UsageError(f"unknown engine '{name}' in --engines", f"use some of: {', '.join(known)}")
    served = {engine_name(name) for name, _ in spec.serve}
    if REFERENCE in served:
        raise UsageError(f"{REFERENCE} is the reference: it takes no --serve settings (the checkpoint's config is "
                         "what it runs)", f"drop --serve {REFERENCE}=...")
    for flag, pairs in (("--serve", spec.serve), ("--engine-python", spec.engine_python)):
        for name in (engine_name(n) for n, _ in pairs):
            if name not in names:
                raise UsageError(f"{flag} {name}=... names an engine that is not in --engines ({', '.join(names)})",
                                 f"add {name} to --engines, or drop {flag} {name}=...")
    return tuple(dict.fromkeys([REFERENCE, *names]))


def make_plan(spec: VerifySpec, config: dict[str, Any]) -> Plan:
    from ropectl.rope.methods import owner_of
    from ropectl.rope.reextend import shipped_context
    from ropectl.runtime.model import method_states, resolve_device, resolve_dtype_choice, trained_context

    state = method_states(config, ())[0]
    trained = int(trained_context(config) or state.rope.trained_context or 0)
    target = int(spec.target or shipped_context(state.rope, trained) or trained)
    if spec.target is not None and spec.target < 2:
        raise UsageError(f"-t {spec.target} is too short to score", "pass a target of at least 2 tokens")
    if spec.samples < 1:
        raise UsageError(f"--samples {spec.samples}: verify needs at least one document", "pass --samples 1 or more")
    rule: set[int] = set()
    for rope in state.ropes.values():
        method = owner_of(rope.rope_type)
        if method is not None and method.rule_lengths is not None:
            rule.update(method.rule_lengths(rope, trained, target))
    lengths = tuple(sorted(n for n in {trained, target, *rule} if 2 <= n <= target))
    device = resolve_device(spec.device)
    return Plan(engines=engine_list(spec), trained=trained, target=target, lengths=lengths,
                dtype=resolve_dtype_choice(spec.dtype, device)[0], device=device)


def token_ids(dataset: str | None, tokenizer: Any, samples: int, longest: int,
              say: Callable[[str], None]) -> tuple[tuple[int, ...], ...]:
    """The first ``samples`` documents holding ``longest`` tokens, cut to it."""
    from ropectl.runtime.corpus import make_source

    source, out, seen = make_source(dataset), [], 0
    for _, text in source.texts():
        seen += 1
        if text.strip():
            ids = tokenizer(text, add_special_tokens=True, verbose=False)["input_ids"]
            if len(ids) >= longest:
                out.append(tuple(int(t) for t in ids[:longest]))
        if len(out) >= samples:
            break
    if not out:
        raise DataError(f"no document of '{source.name}' holds {longest} tokens ({seen} read)",
                        "pass --dataset with longer documents, or a lower -t")
    if len(out) < samples:
        say(f"only {len(out)} of '{source.name}''s documents hold {longest} tokens: scoring {len(out)}")
    return tuple(out)
