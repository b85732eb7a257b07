"""What a reader (an engine, in a version range) is: frozen data, interpreted in one place per engine.

A ``Reader`` says which config keys it reads, where it takes the original (pretraining) length from,
how it derives the factor and the serving length, and its ``Quirk``s: the ways it departs from the
canonical (transformers 5) reading for some model types or rope types. ``Reading`` is what a reader
will compute for one config: the RoPE per layer type, or the error it raises.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ropectl.rope.params import RopeParams

# Where a reader takes the original (pretraining) length from, in priority order.
TOP = "top-level original_max_position_embeddings"
DICT = "rope section original_max_position_embeddings"
MAX_POS = "max_position_embeddings"

# Quirk kinds. Each is interpreted by the engine's ``predict``; the table and warnings print ``note``.
UNKNOWN_MODEL = "unknown-model"  # the version has no such model type: loading fails
IGNORES_SCALING = "ignores-scaling"  # the model class builds plain RoPE from the theta alone
EXACT_KEYS = "exact-keys"  # the config class rejects a rope section unless it has exactly these keys
ONLY_TYPES = "only-types"  # the config class rejects other rope types
FAILS = "fails"  # loading or the forward pass raises
HEAD_DIM_IGNORED = "head-dim-ignored"  # rotary width is hidden_size // heads, whatever head_dim says
FLAT_V5_UNSCALED = "flat-v5-unscaled"  # a flat rope_parameters leaves per-layer models' full attention unscaled
NO_PARTIAL = "no-partial-rotary"  # partial rotary factor < 1 fails for this model type
PARTIAL_IGNORED = "partial-ignored"  # partial rotary factor ignored: every dimension rotates
NEEDS_KEYS = "needs-keys"  # loading raises unless the rope section has these keys
NEEDS_HEAD_DIM = "needs-head-dim"  # building raises unless config.json sets head_dim
FIXED_LONGROPE = "fixed-longrope"  # longrope uses one list (``keys``) at every length


def version_key(version: str) -> tuple[int, ...]:
    """``"4.57.6"`` -> (4, 57, 6); suffixes such as ``.dev0`` or ``rc1`` are dropped."""
    return tuple(int(n) for n in re.findall(r"\d+", version.split("+")[0])[:3])


@dataclass(frozen=True)
class VersionRange:
    """``low`` inclusive to ``high`` exclusive (None: no upper end yet)."""

    low: str
    high: str | None = None

    def __contains__(self, version: object) -> bool:
        key = version_key(str(version))
        return version_key(self.low) <= key and (self.high is None or key < version_key(self.high))

    @property
    def label(self) -> str:
        return f"{self.low}+" if self.high is None else f"{self.low} to <{self.high}"


@dataclass(frozen=True)
class Quirk:
    kind: str
    note: str  # what the reader does, in words, naming the keys
    model_types: frozenset[str] = frozenset()  # empty: every model type
    rope_types: frozenset[str] = frozenset()  # empty: every rope type
    versions: VersionRange | None = None  # narrower than the reader's own range
    keys: frozenset[str] = frozenset()  # EXACT_KEYS / ONLY_TYPES / NEEDS_KEYS argument
    fix: str = ""
    exclude: frozenset[str] = frozenset()  # model types it does not apply to

    def applies(self, model_type: str, rope_type: str, version: str | None = None) -> bool:
        return ((not self.model_types or model_type in self.model_types) and model_type not in self.exclude
                and (not self.rope_types or rope_type in self.rope_types)
                and (self.versions is None or version is None or version in self.versions))


@dataclass(frozen=True)
class Reader:
    """One engine's reading of a RoPE config over a version range."""

    engine: str
    versions: VersionRange
    reads: tuple[str, ...]  # config keys holding RoPE settings that it reads, in priority order
    ignores: tuple[str, ...] = ()  # RoPE keys it does not know (stored, never used)
    original_from: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # rope type -> TOP/DICT/MAX_POS
    derived_factor: Mapping[str, str] = field(default_factory=dict)  # rope type -> when factor = max_pos/original
    serving_length: str = ""  # how it derives the longest sequence it accepts
    quirks: tuple[Quirk, ...] = ()
    tested: tuple[str, ...] = ()  # versions the compat tier runs
    serving_notes: Mapping[str, str] = field(default_factory=dict)  # rope type -> what serving_length adds for it

    def serving_rule(self, rope_types: Iterable[str]) -> str:
        """``serving_length``, with the notes of the rope types a reading builds (only what applies to them)."""
        notes = [self.serving_notes[t] for t in dict.fromkeys(rope_types) if t in self.serving_notes]
        return "; ".join([self.serving_length, *notes]) if self.serving_length else "; ".join(notes)

    @property
    def label(self) -> str:
        return f"{self.engine} {self.versions.label}"

    def quirks_for(self, model_type: str, rope_type: str, version: str | None = None) -> tuple[Quirk, ...]:
        return tuple(q for q in self.quirks if q.applies(model_type, rope_type, version))

    def pieces(self) -> tuple[tuple[Reader, str | None], ...]:
        """This reader split where a quirk's own version range starts or ends inside it (Gemma3 arrives in 4.50,
        inside the 4.48 to <4.51 entry): (reader narrowed to one piece, the version to predict it at). A reader
        with no such boundary is itself, predicted with no version."""
        low, high = version_key(self.versions.low), self.versions.high and version_key(self.versions.high)
        cuts = sorted({edge for q in self.quirks if q.versions for edge in (q.versions.low, q.versions.high)
                       if edge and low < version_key(edge) and (not high or version_key(edge) < high)},
                      key=version_key)
        if not cuts:
            return ((self, None),)
        edges = [self.versions.low, *cuts, self.versions.high]
        return tuple((replace(self, versions=VersionRange(a, b)), a) for a, b in zip(edges, edges[1:]))


@dataclass(frozen=True)
class Reading:
    """What one reader computes for one config."""

    reader: Reader
    ropes: Mapping[str, RopeParams] = field(default_factory=dict)  # layer type (or "main") -> RoPE it builds
    error: str | None = None  # why it cannot load the config
    notes: tuple[str, ...] = ()  # quirks that shaped this reading
    serving_length: int | None = None  # longest sequence it derives / accepts (None: no limit)
    logit_scale: float = 1.0  # what its attention code multiplies the logits by beyond transformers' (MLA graphs)
    # What it does with the config's attention features (NoPE layers, chunked attention, a query temperature, Dual
    # Chunk Attention: ``readers.features``), and how it computes otherwise in ways frequencies cannot say
    # (LongRoPE switched per batch, DCA's re-indexed positions, a temperature it does not apply).
    attention: tuple[str, ...] = ()
    also_differs: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_json(self) -> dict[str, Any]:
        return {
            "reader": self.reader.label, "error": self.error, "notes": list(self.notes),
            "serving_length": self.serving_length, "attention": list(self.attention),
            "also_differs": self.also_differs,
            "ropes": {k: {"rope_type": p.rope_type, "rope_theta": p.rope_theta, "rotary_dim": p.rotary_dim,
                          "max_position_embeddings": p.max_position_embeddings, "scaling": dict(p.scaling)}
                      for k, p in self.ropes.items()},
        }


@dataclass(frozen=True)
class ServeView:
    """What a serving line is printed from (``emit_line`` of a serving reader): the checkpoint as the user named it,
    the RoPE ropectl means (per layer type where the model has several), and the length to serve."""

    where: str
    rope: Any  # RopeParams
    layers: Mapping[str, Any]
    partial: float
    target: int
    model_type: str
    config: Mapping[str, Any]
    # The checkpoint as it ships (patch --emit without -m): what the engine reads of it beside the flags counts too
    # (llama.cpp's converter writes llama3 and LongRoPE scaling as tensors that no flag can set).
    kept: bool = False
