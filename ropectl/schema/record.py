"""The ``ropectl`` record: what ropectl writes into a checkpoint's config.json (or GGUF) about itself.

One typed home for it. ``patch`` records the unscaled base (so a second patch replaces the scaling
instead of stacking factors) and the method it applied; ``convert-layout`` records the q/k layout it
wrote; ``finetune`` records the run that trained the checkpoint (base model, method, steps, tokens, data, seed) and
the layout it wrote (``ropectl.finetune.output``). Unknown keys from newer ropectl versions are kept, so reading and
writing back loses nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

KEY = "ropectl"  # the config.json key holding the record


@dataclass(frozen=True)
class BaseRope:
    """The RoPE before ropectl scaled it: the base to scale from next time."""

    rope_theta: float
    max_position_embeddings: int | None = None
    trained_context: int | None = None

    @property
    def context(self) -> int | None:
        """The pretraining context: the trained one, else the unscaled max_position_embeddings."""
        return self.trained_context or self.max_position_embeddings

    def to_json(self) -> dict[str, Any]:
        # Unknown lengths are left out rather than written as null: a record read back is unchanged.
        out: dict[str, Any] = {"rope_theta": float(self.rope_theta)}
        for name in ("max_position_embeddings", "trained_context"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out

    @classmethod
    def from_json(cls, raw: Any) -> BaseRope | None:
        if not isinstance(raw, Mapping) or not raw.get("rope_theta"):
            return None
        max_pos, trained = raw.get("max_position_embeddings"), raw.get("trained_context")
        return cls(float(raw["rope_theta"]), int(max_pos) if max_pos else None, int(trained) if trained else None)


@dataclass(frozen=True)
class Record:
    """``config["ropectl"]``; every field optional, since each command writes only its own part."""

    base: BaseRope | None = None
    method: str | None = None
    layout: str | None = None
    layout_source: str | None = None
    finetune: Mapping[str, Any] | None = None  # the fine-tune's provenance, JSON values as written
    extra: Mapping[str, Any] = field(default_factory=dict)  # keys this version does not know, kept verbatim

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.extra)
        if self.base is not None:
            out["base"] = self.base.to_json()
        for name in ("method", "layout", "layout_source"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.finetune is not None:
            out["finetune"] = dict(self.finetune)
        return out

    @classmethod
    def from_json(cls, raw: Any) -> Record:
        if not isinstance(raw, Mapping):
            return cls()
        known = ("base", "method", "layout", "layout_source", "finetune")
        text = {k: str(raw[k]) if raw.get(k) is not None else None for k in known[1:4]}
        tuned = raw.get("finetune")
        return cls(base=BaseRope.from_json(raw.get("base")), **text,
                   finetune=dict(tuned) if isinstance(tuned, Mapping) else None,
                   extra={k: v for k, v in raw.items() if k not in known or k == "finetune" and tuned is not None
                          and not isinstance(tuned, Mapping)})  # a foreign shape is kept verbatim

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> Record:
        """The record in a config dict (top level, else a multimodal wrapper's text_config)."""
        raw = config.get(KEY)
        inner = config.get("text_config")
        if raw is None and isinstance(inner, Mapping):
            raw = inner.get(KEY)
        return cls.from_json(raw)

    def with_(self, **changes: Any) -> Record:
        return replace(self, **changes)

    def written_into(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of ``config`` holding this record (removed when empty)."""
        out = dict(config)
        data = self.to_json()
        if data:
            out[KEY] = data
        else:
            out.pop(KEY, None)
        return out

    def __bool__(self) -> bool:
        return bool(self.to_json())
