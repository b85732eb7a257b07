"""The per-engine view: what each known reader computes from one config, and where it differs from ropectl.

``patch`` warns with the disagreements of the config it wrote; ``inspect --engines`` shows every view.
Both come from the reader entries, so a reader's knowledge lives in one place.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ropectl.readers import engines
from ropectl.readers.base import Reader, Reading, version_key
from ropectl.rope.frequencies import compute_frequencies
from ropectl.rope.params import RopeParams

REL_TOL = 1e-6


SHORT = "accepts at most"


@dataclass(frozen=True)
class EngineView:
    """One reader's reading of a config, compared with what ropectl means it to compute."""

    reading: Reading
    differs: str | None  # how it differs from ropectl (None: identical at every length checked)
    fix: str | None = None

    @property
    def reader(self) -> Reader:
        return self.reading.reader

    def summary(self) -> dict[str, Any]:
        """theta, frequency range and attention factor per layer type, at load time."""
        out = {}
        for layer, p in self.reading.ropes.items():
            freqs = compute_frequencies(p)
            inv = freqs.inv_freq
            out[layer] = {"rope_type": p.rope_type, "rope_theta": p.rope_theta, "factor": p.factor,
                          "original": p.original_max_position_embeddings, "frequencies": len(inv),
                          "inv_freq_max": max(inv, default=None), "inv_freq_min": min(inv, default=None),
                          "attention_factor": freqs.attention_factor}
        return out

    @property
    def too_short(self) -> bool:
        """It computes what ropectl means, but refuses the target length by default (see ``_short``)."""
        return bool(self.differs and self.differs.startswith(SHORT))

    def warning(self) -> str | None:
        return _warning(self.to_json())

    def to_json(self) -> dict[str, Any]:
        versions = self.reader.versions
        return {"reader": self.reader.label, "engine": self.reader.engine, "versions": [versions.low, versions.high],
                "agrees": self.differs is None,
                "differs": self.differs, "fix": self.fix, "error": self.reading.error,
                "notes": list(self.reading.notes), "attention": list(self.reading.attention),
                "serving_length": self.reading.serving_length,
                "serving_rule": self.reader.serving_rule(p.rope_type for p in self.reading.ropes.values()),
                "layers": self.summary()}


def _layer(ropes: Mapping[str, RopeParams], name: str) -> RopeParams | None:
    return ropes.get(name) or (ropes.get("main") or ropes.get("full_attention") if name in ("main",
                                                                                             "full_attention") else None)


def _describe(rope: RopeParams) -> str:
    factor, original = rope.factor, rope.original_max_position_embeddings
    return (f"{rope.rope_type} theta {rope.rope_theta:g}" + (f", factor {factor:g}" if factor is not None else "")
            + (f", original {original}" if original else ""))


def rope_difference(got: Mapping[str, RopeParams], want: Mapping[str, RopeParams],
                    lengths: Iterable[int | None]) -> str | None:
    """How ``got`` differs from ``want`` (largest relative error, per layer and length), or None."""
    for layer, expected in want.items():
        actual = _layer(got, layer)
        if actual is None:
            return f"builds no rotary embedding for {layer}"
        for length in lengths:
            a, e = compute_frequencies(actual, length), compute_frequencies(expected, length)
            where = f"{layer} " if layer != "main" else ""
            at = f" at {length} tokens" if length else ""
            if len(a.inv_freq) != len(e.inv_freq):
                return f"builds {len(a.inv_freq)} {where}frequencies instead of {len(e.inv_freq)}{at}"
            # Proportional RoPE has zero frequencies for its unrotated pairs: compare those absolutely.
            err = max((abs(x - y) / (abs(y) or 1.0) for x, y in zip(a.inv_freq, e.inv_freq)), default=0.0)
            att = abs(a.attention_factor - e.attention_factor) / e.attention_factor
            if not (err <= REL_TOL and att <= REL_TOL) or not math.isfinite(err):
                return (f"computes other {where}RoPE{at}: {_describe(actual)} (inv_freq relative error {err:.1e}, "
                        f"attention {a.attention_factor:.4f} vs {e.attention_factor:.4f})")
    return None


def _logit_difference(reading: Reading) -> str | None:
    if abs(reading.logit_scale - 1.0) <= REL_TOL:
        return None
    return f"scales the attention logits by {reading.logit_scale:.4f} against transformers"


def _with_why(differs: str | None, reading: Reading) -> str | None:
    """A difference, with the reader's notes that explain it."""
    return differs and "; ".join([differs, *reading.notes])


def _joined(*parts: str | None) -> str | None:
    """A RoPE difference and a difference beyond the frequencies (readers.features), both said."""
    return "; and it ".join(p for p in parts if p) or None


def _short(reading: Reading, target: int | None) -> str | None:
    """An engine that enforces a length shorter than the target refuses longer prompts (loudly)."""
    served = reading.serving_length
    if target and served and served < target:
        return f"{SHORT} {served} tokens by default, below the target {target}"
    return None


def _fix(reading: Reading, later: list[tuple[Reader, bool]]) -> str | None:
    said = (reading.error or "") + (reading.also_differs or "")
    quirk_fix = next((q.fix for q in reading.reader.quirks if q.fix and q.note in said
                      or q.note in reading.notes and q.fix), None)
    if quirk_fix:
        return quirk_fix
    first_good = next((r for r, ok in later if ok), None)
    if first_good is not None and first_good.engine == reading.reader.engine:
        return f"use {first_good.engine} >= {first_good.versions.low}"
    return None


def _readings(reader: Reader, predict: Any, config: Mapping[str, Any]) -> list[tuple[Reader, Reading]]:
    """The reader's reading, or one per piece of its range where a quirk's own versions change what it reads."""
    pieces = [(piece, predict(piece, config, version)) for piece, version in reader.pieces()]
    if all(_same(r, pieces[0][1]) for _, r in pieces[1:]):
        return [(reader, replace(pieces[0][1], reader=reader))]
    return pieces


def _same(a: Reading, b: Reading) -> bool:
    return (dict(a.ropes), a.error, a.notes, a.serving_length, a.logit_scale, a.attention, a.also_differs) == (
        dict(b.ropes), b.error, b.notes, b.serving_length, b.logit_scale, b.attention, b.also_differs)


def engine_views(config: Mapping[str, Any], expected: Mapping[str, RopeParams],
                 lengths: Iterable[int | None] = (None,)) -> list[EngineView]:
    """Every reader's view of ``config`` against the ``expected`` RoPE (layer type or "main" -> params)."""
    lengths = tuple(lengths)
    target = max((n for n in lengths if n), default=None)
    readings = [pair for reader, predict in engines() for pair in _readings(reader, predict, config)]
    differs = [reading.error and f"cannot load it: {reading.error}" or _joined(_with_why(
        rope_difference(reading.ropes, expected, lengths) or _logit_difference(reading), reading),
        reading.also_differs) or _short(reading, target) for _, reading in readings]
    views = []
    for i, (_, reading) in enumerate(readings):
        later = [(r, d is None) for (r, _), d in zip(readings[i + 1:], differs[i + 1:])]
        views.append(EngineView(reading, differs[i], _fix(reading, later) if differs[i] else None))
    return views


def _warning(view: Mapping[str, Any]) -> str | None:
    if view["differs"] is None:
        return None
    return f"{_span(view['engine'], *view['versions'])}: {view['differs']}" + (f"; fix: {view['fix']}" if view["fix"] else "")


def _span(engine: str, low: str, high: str | None) -> str:
    if version_key(low) == (0,) or version_key(low) == (0, 0):
        return f"{engine} (every version)" if high is None else f"{engine} before {high}"
    return f"{engine} {low}+" if high is None else f"{engine} {low} to <{high}"


def merge_runs(views: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive versions of one engine that read a config the same way, as one view (``to_json`` form) whose
    ``reader`` names the whole span: a plain GGUF is one "same" line per engine, not one per version range."""
    out: list[dict[str, Any]] = []
    for view in views:
        prev = out[-1] if out else None
        same = prev is not None and prev["engine"] == view["engine"] and all(
            prev[k] == view[k] for k in view if k not in ("reader", "versions", "serving_rule", "notes"))
        if same:
            prev["versions"] = [prev["versions"][0], view["versions"][1]]
            prev["reader"] = _span(view["engine"], *prev["versions"])
        else:  # named as the warnings name it ("vLLM before 0.9"), merged or not
            out.append({**view, "reader": _span(view["engine"], *view["versions"])})
    return out


def disagreement_warnings(views: Iterable[EngineView]) -> list[str]:
    """One line per run of versions that differ the same way."""
    return [w for w in (_warning(v) for v in merge_runs(v.to_json() for v in views)) if w]
