"""Before/after summary of a patch: what changed, per dimension pair, in plain numbers."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ropectl.rope.frequencies import compute_frequencies
from ropectl.rope.methods import effective_factor
from ropectl.rope.params import RopeParams

RATIO_TOL = 1e-3


@dataclass(frozen=True)
class RopeState:
    rope_type: str
    rope_theta: float
    factor: float | None
    max_position_embeddings: int | None
    attention_factor: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "rope_type": self.rope_type, "rope_theta": self.rope_theta, "factor": self.factor,
            "max_position_embeddings": self.max_position_embeddings, "attention_factor": self.attention_factor,
        }


def rope_state(params: RopeParams, seq_len: int | None = None, factor: float | None = None) -> RopeState:
    freqs = compute_frequencies(params, seq_len)
    return RopeState(params.rope_type, float(params.rope_theta), factor if factor is not None else effective_factor(params),
                     params.max_position_embeddings, float(freqs.attention_factor))


def classify_pairs(base: Sequence[float], scaled: Sequence[float], factor: float | None) -> dict[str, int]:
    """Per pair, base/scaled frequency ratio: ~1 kept, ~factor interpolated, anything else blended."""
    counts = {"interpolated": 0, "kept": 0, "blended": 0}
    for b, s in zip(base, scaled, strict=True):
        ratio = b / s if s else (1.0 if not b else math.inf)  # p-RoPE's unrotated pairs: 0 stays 0, kept
        if math.isclose(ratio, 1.0, rel_tol=RATIO_TOL):
            counts["kept"] += 1
        elif factor and factor != 1 and math.isclose(ratio, factor, rel_tol=RATIO_TOL):
            counts["interpolated"] += 1
        else:
            counts["blended"] += 1
    counts["total"] = len(base)
    return counts


def pair_counts(base: RopeParams, scaled: RopeParams, target: int, factor: float | None) -> dict[str, int]:
    """Counted at the target length, where dynamic and longrope show their long-context frequencies."""
    return classify_pairs(compute_frequencies(base).inv_freq, compute_frequencies(scaled, target).inv_freq, factor)


@dataclass(frozen=True)
class PatchResult:
    """Everything ``ropectl patch`` reports; ``to_dict`` is the ``--json`` object."""

    model: str
    kind: str
    method: str
    mode: str  # output | in-place | dry-run | emit
    schema: str
    before: RopeState
    after: RopeState
    trained_context: int | None
    target_context: int | None
    pairs: Mapping[str, int]
    other_layers: Mapping[str, float] = field(default_factory=dict)  # layer type -> kept rope_theta
    composed_from_record: bool = False
    output: str | None = None
    files: tuple[tuple[str, str], ...] = ()
    backup: str | None = None
    verification: Mapping[str, Any] | None = None
    diff: str | None = None
    emit: Mapping[str, Any] | None = None
    warnings: tuple[str, ...] = ()
    readers: tuple[Mapping[str, Any], ...] = ()  # each known reader's view of the written config
    card: Mapping[str, Any] | None = None  # the model card recognised (ropectl.families.cards) and its caveat
    notes: tuple[str, ...] = ()  # printed on stderr beside the result (stdout stays pasteable)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "kind": self.kind, "method": self.method, "mode": self.mode, "schema": self.schema,
            "before": self.before.to_dict(), "after": self.after.to_dict(),
            "trained_context": self.trained_context, "target_context": self.target_context,
            "pairs": dict(self.pairs), "other_layers": dict(self.other_layers),
            "composed_from_record": self.composed_from_record, "output": self.output,
            "files": [{"path": p, "how": how} for p, how in self.files], "backup": self.backup,
            "verification": dict(self.verification) if self.verification else None,
            "diff": self.diff, "emit": dict(self.emit) if self.emit else None, "warnings": list(self.warnings),
            "readers": [dict(r) for r in self.readers],
            "card": dict(self.card) if self.card else None, "notes": list(self.notes),
        }
