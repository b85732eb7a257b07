"""The method registry: one :class:`Method` per module in this package, plus any a user registers.

A method module defines ``METHOD = Method(...)``: its options, how it builds the scaled RoPE, the frequencies of
the rope type it writes, its validation, its GGUF form and its write rules. Everything else (CLI help and
choices, the rope types the schema accepts and their spellings, the write form, the GGUF keys and refusals,
re-extension, eval-ppl's per-length switch, the reference row, recommend's default candidates) is derived from
these records: outside the readers' package (``ropectl.readers``) no code compares a method's name, it asks the
record (tests/rope/test_method_homes.py). Third-party methods arrive through :func:`register_method`, the ``ropectl.methods``
entry-point group, or ``ROPECTL_METHODS`` (comma-separated module names, each defining ``METHOD``).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ropectl.errors import MethodError
from ropectl.rope.methods.bounds import SearchBound
from ropectl.rope.params import Frequencies, RopeParams

TRAINED, TARGET = "trained", "target"  # the write forms of max_position_embeddings (schema.write)
BUILTIN = ("none", "as-is", "linear", "ntk", "dynamic", "yarn", "llama3", "longrope", "proportional")
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
    # max_position_embeddings per write form, where it is not the target (docs/reference/write-form.md says why).
    max_positions: Mapping[str, str] = field(default_factory=dict)
    max_position_rule: str = "raised to the target context"  # in words, for patch and the docs
    length_dependent: bool = False  # its frequencies change with the sequence length
    # The lengths where its length-dependent rule bites, from (its RoPE, trained, target): verify scores them too
    # (longrope: the original length and one past it; dynamic: a length that is not the served maximum).
    rule_lengths: Callable[[RopeParams, int, int], tuple[int, ...]] | None = None
    needs_original: bool = False  # its rope section carries original_max_position_embeddings
    keeps_prope: bool = False  # it keeps a p-RoPE model's layout (unrotated pairs at 0)
    # --- what the config reader, the writer, patch and recommend ask instead of comparing names ---
    unscaled: bool = False  # it writes the model's unscaled RoPE: patch's undo, evaluation's reference row
    # It is the checkpoint as it ships (as-is): the config is left unchanged, and it builds no RoPE of its own;
    # evaluation's other reference row, recommend's "ship it unchanged", patch --emit without -m.
    keeps_checkpoint: bool = False
    prope: bool = False  # its rope type is p-RoPE's layout: rotary_dim is the whole head, partial factor its own key
    aliases: tuple[str, ...] = ()  # other spellings of its rope type in published configs ("su" for longrope)
    not_a_type: str = ""  # why a config naming this method as its rope type is wrong (ntk is a theta change)
    # A section without a factor means max_position_embeddings / original_max_position_embeddings (transformers).
    implied_factor: bool = False
    # transformers takes the original length from max_position_embeddings when the section omits it, so an equal
    # one is left out of the v4 form (4.51-4.55 then keep the factor).
    original_from_max_positions: bool = False
    original_at_top_level: bool = False  # transformers 4 reads its original length only from the top level
    explicit_attention_factor: bool = False  # the v4 form states attention_factor (4.43's validation demands it)
    # A published scaling of this type names the pretraining length, so patch can undo it exactly and re-extend
    # from there, keeping these options of the shipped section unless the user sets them.
    reextendable: bool = False
    carried_options: tuple[str, ...] = ()
    factors_file: tuple[str, ...] = ()  # list options patch's --longrope-file supplies from a JSON file
    gguf_untyped: bool = False  # llama.cpp reads a factor without rope.scaling.type as this method
    # Its rope.scaling.* GGUF keys beyond the type, by gguf.Keys.Rope attribute name, and their reading back.
    gguf_keys: Callable[[RopeParams], Mapping[str, Any]] | None = None
    gguf_read: Callable[[dict[str, Any], Callable[[str], Any]], dict[str, Any]] | None = None
    patch_note: str = ""  # a line patch prints whenever it writes this method
    # A line patch prints for some sections it writes (the written RoPE, the shipped one; "" for none): llama3's equal
    # bands, and whose they are.
    patch_note_for: Callable[[RopeParams, RopeParams | None], str] | None = None
    candidate_order: int | None = None  # its place among the methods recommend tries without a card (lower first)
    inference_only: str = ""  # why a model cannot be fine-tuned with it ("" where it can): finetune refuses it
    # --- ropectl search (docs/reference/search.md) ---
    search_bounds: Callable[[float], tuple[SearchBound, ...]] | None = None  # stage 1: its box at a factor
    search_per_pair: bool = False  # stage 2: LongRoPE's evolution over the per-pair factors it writes
    search_seed: bool = False  # its per-pair factors seed stage 2 (LongRoPE seeds from PI, NTK and YaRN)
    search_default: bool = False  # the space `search` takes without --space

    @property
    def max_positions_vary(self) -> bool:
        """Some write form keeps max_position_embeddings at the trained length (the target is trained x factor)."""
        return bool(self.max_positions)

    def written_max_positions(self, form: str) -> str:
        """TARGET or TRAINED: what ``max_position_embeddings`` is in write form ``form``."""
        return self.max_positions.get(form, TARGET)

    def needs_factor(self, max_positions: int | None) -> bool:
        """Whether a config section of its type must state a factor: not where the type is also an unscaled layout
        (p-RoPE), nor where max_position_embeddings / original implies it."""
        return self.uses_factor and not self.prope and not (self.implied_factor and max_positions is not None)

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


def implied_factor(rope: RopeParams) -> bool:
    """True when ``rope``'s factor is not written but implied (its type's ``Method.implied_factor``: Phi-3-style
    longrope, and yarn without one): transformers then takes max_position_embeddings / original."""
    owner = owner_of(rope.rope_type)
    return (rope.factor is None and owner is not None and owner.implied_factor
            and bool(rope.max_position_embeddings and rope.original_max_position_embeddings))


def effective_factor(rope: RopeParams) -> float | None:
    """The factor the model uses: the written one, else the implied one (see :func:`implied_factor`)."""
    if implied_factor(rope):
        return int(rope.max_position_embeddings or 0) / int(rope.original_max_position_embeddings or 1)
    return rope.factor


def rope_types() -> tuple[str, ...]:
    """Every rope type ropectl can compute, in registry order."""
    return tuple(_ROPE_TYPES)


def rope_types_where(predicate: Callable[[Method], bool]) -> tuple[str, ...]:
    """The rope types whose owning method satisfies ``predicate``, in registry order."""
    return tuple(t for t, m in _ROPE_TYPES.items() if predicate(m))


def find_method(name: str) -> Method | None:
    """The method named ``name``, or None (for readers that only ask)."""
    return METHODS.get(name.strip().lower())


def method_of_type(rope_type: str) -> Method | None:
    """The method that owns ``rope_type`` (see ``owner_of``), else the one named so: a config naming ``ntk``."""
    return _ROPE_TYPES.get(rope_type) or METHODS.get(rope_type)


def first_where(predicate: Callable[[Method], bool]) -> Method:
    """The first registered method with a property (``unscaled``: the reference row of every evaluation)."""
    return next(m for m in METHODS.values() if predicate(m))


def unscaled_name() -> str:
    """The method that writes the unscaled RoPE: patch's undo and evaluation's reference row ("none")."""
    return first_where(lambda m: m.unscaled).name


def as_is_name() -> str:
    """The method that keeps the checkpoint as it ships ("as-is"): patch --emit's default, evaluation's other
    reference row."""
    return first_where(lambda m: m.keeps_checkpoint).name


def type_aliases() -> dict[str, str]:
    """{spelling: rope type} for the methods' aliases; where a method owns no rope type (ntk), its name."""
    return {a: (m.rope_type if _ROPE_TYPES.get(m.rope_type) is m else m.name)
            for m in METHODS.values() for a in m.aliases}


def is_prope_type(rope_type: str) -> bool:
    """Whether ``rope_type`` is p-RoPE's layout (Gemma 4's proportional)."""
    owner = _ROPE_TYPES.get(rope_type)
    return owner is not None and owner.prope


def gguf_owner(gguf_type: str | None) -> Method | None:
    """The method llama.cpp's ``rope.scaling.type`` names (a factor with no type: the ``gguf_untyped`` one)."""
    found = [m for m in METHODS.values() if (m.gguf_type == gguf_type if gguf_type else m.gguf_untyped)]
    return next((m for m in found if _ROPE_TYPES.get(m.rope_type) is m), found[0] if found else None)


def default_candidates() -> tuple[str, ...]:
    """The methods recommend tries on a model without a card recipe, in their ``candidate_order``."""
    ranked = [m for m in METHODS.values() if m.candidate_order is not None]
    return tuple(m.name for m in sorted(ranked, key=lambda m: m.candidate_order or 0))


def search_spaces() -> dict[str, Method]:
    """The methods ``ropectl search`` takes as a --space (stage 1 boxes, then stage 2), in registry order."""
    return {n: m for n, m in METHODS.items() if m.search_bounds is not None or m.search_per_pair}


def method_names(exclude: tuple[str, ...] = (), where: Callable[[Method], bool] | None = None) -> str:
    """"a, b or c": the registered names (those satisfying ``where``), for help and hints."""
    names = [n for n, m in METHODS.items() if n not in exclude and (where is None or where(m))]
    return ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else "".join(names)


def module_of(name: str) -> str:
    """The module of a built-in method: its name as a Python identifier (as-is in ``as_is``)."""
    return name.replace("-", "_")


def load(module_name: str) -> Method:
    """Import a method module and register its ``METHOD``."""
    module = importlib.import_module(module_name)
    method = getattr(module, "METHOD", None)
    if not isinstance(method, Method):
        raise MethodError(f"module '{module_name}' defines no METHOD", "define METHOD = Method(...) in it")
    return register_method(method)


def load_all() -> None:
    for name in BUILTIN:
        load(f"{__package__}.{module_of(name)}")
    for module_name in filter(None, (m.strip() for m in os.environ.get(ENV_MODULES, "").split(","))):
        load(module_name)
    from importlib.metadata import entry_points

    for entry in entry_points(group=ENTRY_POINT_GROUP):
        load(entry.value)
