"""The method registry: one :class:`Method` per module in this package, plus any a user registers.

A method module defines ``METHOD = Method(...)``: its options, how it builds the scaled RoPE, the frequencies of
the rope type it writes, its validation, its GGUF form and its write rules. Everything else (CLI help and
choices, the rope types the schema accepts, the write form, the GGUF refusals, eval-ppl's per-length switch) is
derived from these records. Third-party methods arrive through :func:`register_method`, the ``ropectl.methods``
entry-point group, or ``ROPECTL_METHODS`` (comma-separated module names, each defining ``METHOD``).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ropectl.errors import MethodError
from ropectl.rope.params import Frequencies, RopeParams

TRAINED, TARGET = "trained", "target"  # the write forms of max_position_embeddings (schema.write)
BUILTIN = ("none", "linear", "ntk", "dynamic", "yarn", "llama3", "longrope", "proportional")
ENTRY_POINT_GROUP = "ropectl.methods"
ENV_MODULES = "ROPECTL_METHODS"


@dataclass(frozen=True)
class Param:
    name: str
    kind: type  # float, int, bool or list (of floats)
    default: Any = None
    help: str = ""


@dataclass(frozen=True)
class Method:
    name: str
    summary: str
    params: tuple[Param, ...]
    build: Callable[[RopeParams, float, Mapping[str, Any]], RopeParams]
    rope_type: str  # the transformers rope type it writes ("default" for none and NTK)
    # Inverse frequencies and attention factor of ``rope_type`` at a length, where this method owns that type.
    frequencies: Callable[[RopeParams, int | None], Frequencies] | None = None
    validate: Callable[[Mapping[str, Any], int], None] | None = None  # typed options, rotary dim; raises
    uses_factor: bool = True
    gguf_type: str | None = None  # llama.cpp's rope.scaling.type; None where GGUF metadata cannot hold it
    gguf_none: str = ""  # why it cannot, where gguf_type is None
    # What to do instead, where converting the patched checkpoint would not carry it either ("" where it would).
    gguf_fix: str = ""
    # max_position_embeddings per write form, where it is not the target (docs/write-form.md says why).
    max_positions: Mapping[str, str] = field(default_factory=dict)
    max_position_rule: str = "raised to the target context"  # in words, for patch and the docs
    length_dependent: bool = False  # its frequencies change with the sequence length
    needs_original: bool = False  # its rope section carries original_max_position_embeddings
    keeps_prope: bool = False  # it keeps a p-RoPE model's layout (unrotated pairs at 0)

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        known = ", ".join(p.name for p in self.params) or "none"
        raise MethodError(f"method '{self.name}' has no option '{name}'", f"use one of: {known}")


METHODS: dict[str, Method] = {}
_ROPE_TYPES: dict[str, Method] = {}  # rope type -> the method that owns its frequencies


def register_method(method: Method) -> Method:
    """Add ``method`` (or replace one of the same name); returns it, so a module can write
    ``METHOD = register_method(Method(...))``."""
    METHODS[method.name] = method
    if method.frequencies is not None:
        _ROPE_TYPES[method.rope_type] = method
    return method


def get_method(name: str) -> Method:
    try:
        return METHODS[name.strip().lower()]
    except KeyError:
        raise MethodError(f"unknown method '{name}'", f"use one of: {', '.join(METHODS)}") from None


def owner_of(rope_type: str) -> Method | None:
    """The method whose module computes ``rope_type``'s frequencies, or None for an unknown type."""
    return _ROPE_TYPES.get(rope_type)


def rope_types() -> tuple[str, ...]:
    """Every rope type ropectl can compute, in registry order."""
    return tuple(_ROPE_TYPES)


def rope_types_where(predicate: Callable[[Method], bool]) -> tuple[str, ...]:
    """The rope types whose owning method satisfies ``predicate``, in registry order."""
    return tuple(t for t, m in _ROPE_TYPES.items() if predicate(m))


def method_names(exclude: tuple[str, ...] = ()) -> str:
    """"a, b or c": the registered names, for help and hints."""
    names = [n for n in METHODS if n not in exclude]
    return ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else "".join(names)


def load(module_name: str) -> Method:
    """Import a method module and register its ``METHOD``."""
    module = importlib.import_module(module_name)
    method = getattr(module, "METHOD", None)
    if not isinstance(method, Method):
        raise MethodError(f"module '{module_name}' defines no METHOD", "define METHOD = Method(...) in it")
    return register_method(method)


def load_all() -> None:
    for name in BUILTIN:
        load(f"{__package__}.{name}")
    for module_name in filter(None, (m.strip() for m in os.environ.get(ENV_MODULES, "").split(","))):
        load(module_name)
    from importlib.metadata import entry_points

    for entry in entry_points(group=ENTRY_POINT_GROUP):
        load(entry.value)
