"""``inspect``: explain a checkpoint's RoPE, with the values the model will actually use."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ropectl import families
from ropectl.errors import MethodError, UsageError
from ropectl.families import cards
from ropectl.families.attention import DCA_KEY, describe, length_bounds
from ropectl.io.resolve import resolve_model
from ropectl.layout.detect import known_layout
from ropectl.limits import MAX_POSITIONS
from ropectl.readers.view import engine_section, engine_warnings
from ropectl.rope.analysis import PairReport, first_non_rotating, pair_reports
from ropectl.rope.frequencies import base_inv_freq, compute_frequencies, mrope_prerotated, softmax_mscale
from ropectl.rope.methods import effective_factor, implied_factor, owner_of
from ropectl.rope.params import Frequencies, RopeParams
from ropectl.schema import ModelRope, read_model_rope
from ropectl.schema.record import Record

ERNIE_MROPE_SECTION = (22, 22, 20)  # transformers' default when the config names none


@dataclass(frozen=True, kw_only=True)
class InspectSpec:
    model: str
    seq_len: int | None = None
    plot: Path | None = None
    engines: bool = False  # include each reader's full view (always: its disagreements as warnings)

    def __post_init__(self) -> None:
        if self.seq_len is not None and not 1 <= self.seq_len <= MAX_POSITIONS:
            raise UsageError(f"--seq-len must be a positive integer up to {MAX_POSITIONS:,}, got {self.seq_len}",
                             "pass e.g. --seq-len 16384")
        if self.plot is not None and Path(self.plot).suffix.lower() != ".png":
            raise UsageError(f"--plot '{self.plot}' is not a .png path", "pass a file name ending in .png")


@dataclass(frozen=True)
class InspectReport:
    source: str
    kind: str
    model: ModelRope
    layout: str
    layout_reason: str
    seq_len: int | None
    inv_freq: tuple[float, ...]
    attention_factor: float
    effective_theta: float
    base_theta: float
    trained_context: int | None
    target_context: int | None
    pairs: tuple[PairReport, ...]
    layers: dict[str, dict[str, Any]] = field(default_factory=dict)
    plot: Path | None = None
    engines: tuple[dict[str, Any], ...] = ()  # per-reader views (inspect --engines)
    engine_warnings: tuple[str, ...] = ()
    softmax_scale: float = 1.0  # on top of 1/sqrt(d): mscale(factor, mscale_all_dim)^2 for DeepSeek-style attention

    def to_dict(self) -> dict[str, Any]:
        m, rope = self.model, self.model.rope
        non_rotating = first_non_rotating(self.pairs)
        return {
            "source": self.source,
            "kind": self.kind,
            "model_type": m.model_type,
            "architectures": list(m.architectures),
            "head_dim": m.head_dim,
            "rotary_dim": m.rotary_dim,
            "partial_rotary_factor": m.partial_rotary_factor,
            "num_attention_heads": m.num_attention_heads,
            "num_key_value_heads": m.num_key_value_heads,
            "rope_theta": rope.rope_theta,
            "rope_type": rope.rope_type,
            "factor": effective_factor(rope),
            "factor_source": ("implied: max_position_embeddings / original_max_position_embeddings"
                              if implied_factor(rope) else "config" if rope.factor is not None else None),
            "original_max_position_embeddings": rope.original_max_position_embeddings,
            "max_position_embeddings": rope.max_position_embeddings,
            "trained_context": self.trained_context,
            "trained_context_source": _context_source(m),
            "finetune": Record.from_json(m.record).finetune,  # ropectl finetune's provenance (None: not fine-tuned)
            "model_card": card_summary(m.card),
            "notes": [m.card_note] if m.card_note else [],
            "target_context": self.target_context,
            "scaling": dict(rope.scaling),
            "seq_len": self.seq_len,
            "effective_theta": self.effective_theta,
            "attention_factor": self.attention_factor,
            "softmax_scale": self.softmax_scale,
            "inv_freq": list(self.inv_freq),
            # p-RoPE's unrotated pairs have an infinite wavelength: null in JSON, which has no infinity.
            "wavelengths": [p.wavelength if math.isfinite(p.wavelength) else None for p in self.pairs],
            "pairs_rotating_in_trained_context": sum(p.rotates_in_trained for p in self.pairs),
            "pairs_never_rotating_in_trained_context": sum(not p.rotates_in_trained for p in self.pairs),
            "first_non_rotating_pair": non_rotating,
            "layout": self.layout,
            "layout_reason": self.layout_reason,
            "schema": m.schema,
            "layers": self.layers,
            "attention": _attention(m, self.seq_len or self.target_context or self.trained_context),
            "warnings": [*m.warnings, *self.engine_warnings],
            "engines": list(self.engines),
            "plot": str(self.plot) if self.plot else None,
        }


def _attention(model: ModelRope, length: int | None) -> dict[str, Any]:
    """The attention features beside the RoPE (``families.attention``), and what they bound at the length stated."""
    f = model.attention
    if f is None or not f.any:
        return {"features": [], "bounds": []}
    dca = f.dual_chunk
    return {"features": describe(f), "bounds": length_bounds(f, length), "length": length,
            "nope_layers": list(f.nope_layers), "chunk": f.chunk, "chunked_layers": len(f.chunked_layers),
            "sliding_window": f.window, "sliding_layers": len(f.sliding_layers),
            "dual_chunk": None if dca is None else {"chunk_size": dca.chunk_size, "local_size": dca.local_size,
                                                    "original_max_position_embeddings": dca.original},
            "temperature": None if f.temperature is None else {"scale": f.temperature.scale,
                                                               "floor": f.temperature.floor,
                                                               "layers": f.temperature.layers}}


def _context_source(model: ModelRope) -> str:
    """Where the trained context comes from, in words (inspect prints it beside the number)."""
    if Record.from_json(model.record).base:
        return "ropectl's record of the unscaled base"
    card = cards.by_name(model.card) if model.native_context and model.card else None
    if card is not None:
        return f"model card: {card.native_context:,}; {card.native_note}"
    dca = model.attention.dual_chunk if model.attention else None
    if dca and model.native_context and model.native_context == dca.original:
        return (f"config: {DCA_KEY}.original_max_position_embeddings; the {model.rope.max_position_embeddings:,} "
                "max positions are what Dual Chunk Attention serves, not a trained length")
    if model.rope.original_max_position_embeddings:
        return "config: original_max_position_embeddings"
    return "config: max_position_embeddings"


def card_summary(name: str | None) -> dict[str, Any] | None:
    """The recognised model card: its source, recipes (as presets) and caveat."""
    card = cards.by_name(name) if name else None
    if card is None:
        return None
    return {"name": card.name, "title": card.title, "source": card.source, "native_context": card.native_context,
            "note": card.native_note,
            "presets": [r.preset for r in card.recipes], "caveat": card.caveat.text if card.caveat else None}


def _base_theta(model: ModelRope) -> float:
    """The unscaled base: what ropectl recorded before patching, else the current theta."""
    base = Record.from_json(model.record).base
    return float(base.rope_theta if base else model.rope.rope_theta)


def _contexts(rope: RopeParams, record: Record, model_type: str = "",
              native: int | None = None) -> tuple[int | None, int | None]:
    shipped = families.shipped_original(model_type, rope.rope_type, rope.factor, rope.max_position_embeddings)
    if shipped and not record.base:  # Gemma 3's linear x8: max_position_embeddings is the scaled length already
        return shipped, rope.max_position_embeddings
    trained = (record.base.context if record.base else None) or native or rope.trained_context
    owner = owner_of(rope.rope_type)
    if owner is not None and owner.max_positions_vary and rope.factor and (trained or rope.max_position_embeddings):
        # Where some write form keeps max_position_embeddings at the trained length (dynamic, linear, yarn), the
        # target is factor x the trained length: recorded by patch, named by the config (yarn), or, for a linear or
        # dynamic config without either, max_position_embeddings (vLLM reads those so too).
        target = int(round(int(trained or rope.max_position_embeddings) * rope.factor))
    else:
        target = rope.max_position_embeddings
    return (int(trained) if trained else None), (target if target and trained and target > int(trained) else None)


def _layer_summary(model: ModelRope, seq_len: int | None) -> dict[str, dict[str, Any]]:
    out = {}
    for label, params in model.layer_ropes.items():
        freqs = compute_frequencies(params, seq_len)
        out[label] = {"rope_type": params.rope_type, "rope_theta": params.rope_theta, "factor": params.factor,
                      "attention_factor": freqs.attention_factor, "inv_freq": list(freqs.inv_freq)}
    return out


def _model_frequencies(model: ModelRope, seq_len: int | None) -> Frequencies:
    """The frequencies in the order the model stores them (ERNIE-4.5-VL pre-permutes its default ones)."""
    freqs = compute_frequencies(model.rope, seq_len)
    if model.model_type in families.PRE_ROTATED_MROPE and model.rope.rope_type == "default":
        section = model.rope.scaling.get("mrope_section") or ERNIE_MROPE_SECTION
        return replace(freqs, inv_freq=tuple(mrope_prerotated(freqs.inv_freq, section)))
    return freqs


def _with_commands(views: list[Any], resolved: Any, model: ModelRope, target: int | None) -> list[Any]:
    """A view that serves less than the target gets the command that serves it, as patch prints it."""
    if not target:
        return views
    from ropectl.readers import lm_eval, vllm
    from ropectl.readers.vllm import emit_vllm

    where = resolved.source if resolved.kind == "hub" else str(resolved.path)
    out = []
    for view in views:
        if view.differs and vllm.STATIC_DYNAMIC_NOTE in view.reading.notes:
            view = replace(view, fix=vllm.static_dynamic_fix(where, model.rope.factor, not model.record))
        elif view.too_short and view.reader.engine == vllm.ENGINE:
            try:
                emitted, _ = emit_vllm(where, model.rope, model.layer_ropes, model.partial_rotary_factor, target,
                                       model.model_type, vllm.override_path(resolved.config))
                view = replace(view, fix=f"serve it with: {emitted['command']}")
            except MethodError as exc:  # per-layer partial rotary: no override to print
                view = replace(view, fix=f"ropectl prints no override for it: {exc.problem}")
        elif view.too_short and view.reader.engine == lm_eval.ENGINE:
            view = replace(view, fix=f"run it with: {lm_eval.command(where, target)}")
        out.append(view)
    return out


def inspect_model(spec: InspectSpec) -> InspectReport:
    resolved = resolve_model(spec.model)
    model = read_model_rope(resolved.config)
    rope = model.rope
    freqs = _model_frequencies(model, spec.seq_len)
    trained, target = _contexts(rope, Record.from_json(model.record), model.model_type, model.native_context)
    base_inv = base_inv_freq(_base_theta(model), model.rotary_dim)
    pairs = tuple(pair_reports(base_inv, freqs.inv_freq, trained or rope.max_position_embeddings or 1))
    layout, reason = known_layout(resolved.config)
    views = _with_commands(engine_section(resolved.config, model, target or trained), resolved, model, target)
    report = InspectReport(
        source=resolved.source, kind=resolved.kind, model=model, layout=layout, layout_reason=reason,
        seq_len=spec.seq_len, inv_freq=freqs.inv_freq, attention_factor=freqs.attention_factor,
        effective_theta=freqs.effective_theta, base_theta=_base_theta(model), trained_context=trained,
        target_context=target, pairs=pairs, layers=_layer_summary(model, spec.seq_len), plot=spec.plot,
        engines=tuple(v.to_json() for v in views) if spec.engines else (),
        engine_warnings=tuple(engine_warnings(resolved.config, views)),
        softmax_scale=softmax_mscale(rope) if model.model_type in families.SOFTMAX_MSCALE_TYPES else 1.0,
    )
    if spec.plot is not None:
        from ropectl.inspection.plot import plot_wavelengths

        plot_wavelengths(report, Path(spec.plot))
    return report
